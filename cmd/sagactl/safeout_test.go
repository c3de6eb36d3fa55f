package main

import (
	"bytes"
	"testing"
)

func TestSafeWriter(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\n\ttabbed":               "plain text\n\ttabbed",
		"over limit \x1b[31mRED\x1b]0;pwn\a": `over limit \x1b[31mRED\x1b]0;pwn\x07`,
		"a\rb\x7f":                           `a\x0db\x7f`,
		"c1 \u009b2J, ü and 日本":              `c1 \x9b2J, ü and 日本`,
	} {
		var b bytes.Buffer
		n, err := safeWriter{w: &b}.Write([]byte(in))
		if err != nil || n != len(in) || b.String() != want {
			t.Errorf("%q: wrote %q (%d, %v), want %q", in, b.String(), n, err, want)
		}
	}
	var b bytes.Buffer
	_, _ = safeWriter{w: &b, keepCR: true}.Write([]byte("\r50%"))
	if b.String() != "\r50%" {
		t.Errorf("progress line: %q", b.String())
	}
}
