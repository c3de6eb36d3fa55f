package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestSafeWriter(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\n\ttabbed":               "plain text\n\ttabbed",
		"over limit \x1b[31mRED\x1b]0;pwn\a": `over limit \u001b[31mRED\u001b]0;pwn\u0007`,
		"a\rb\x7f":                           `a\u000db\u007f`,
		"c1 \u009b2J, ü and 日本":              `c1 \u009b2J, ü and 日本`,
	} {
		var b bytes.Buffer
		n, err := safeWriter{w: &b}.Write([]byte(in))
		if err != nil || n != len(in) || b.String() != want {
			t.Errorf("%q: wrote %q (%d, %v), want %q", in, b.String(), n, err, want)
		}
	}
	// JSON stays valid and decodes to the same text.
	var j bytes.Buffer
	_, _ = safeWriter{w: &j}.Write([]byte("{\"v\":\"del\x7f c1\u0085\"}"))
	var v struct{ V string }
	if err := json.Unmarshal(j.Bytes(), &v); err != nil || v.V != "del\x7f c1\u0085" {
		t.Errorf("JSON through safeWriter: %q -> %q, %v", j.String(), v.V, err)
	}
	var b bytes.Buffer
	_, _ = safeWriter{w: &b, keepCR: true}.Write([]byte("\r50%"))
	if b.String() != "\r50%" {
		t.Errorf("progress line: %q", b.String())
	}
}
