package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
)

func TestSafeText(t *testing.T) {
	for in, want := range map[string]string{
		"plain, ü and 日本":             "plain, ü and 日本",
		"x\r\nFAKE LINE":              `x\u000d\u000aFAKE LINE`,
		"tab\there":                   `tab\u0009here`,
		"\x1b[31mred\a\x7f":           `\u001b[31mred\u0007\u007f`,
		"c1 \u0085\u009b":             `c1 \u0085\u009b`,
		"evil\u202egnp.exe":           `evil\u202egnp.exe`,
		"\u061c\u200e\u200f":          `\u061c\u200e\u200f`,
		"\u202a\u202b\u202c\u202d":    `\u202a\u202b\u202c\u202d`,
		"\u2066\u2067\u2068\u2069":    `\u2066\u2067\u2068\u2069`,
		"z\u200bw\u200cj\u200d\ufeff": `z\u200bw\u200cj\u200d\ufeff`,
		"line\u2028para\u2029":        `line\u2028para\u2029`,
		"tag \U000e0041":              `tag \udb40\udc41`,
		"bad \xff\xc2 utf8":           `bad \xff\xc2 utf8`,
	} {
		if got := safeText(in); got != want {
			t.Errorf("safeText(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSafeWriter(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\n\ttabbed":               "plain text\n\ttabbed",
		"over limit \x1b[31mRED\x1b]0;pwn\a": `over limit \u001b[31mRED\u001b]0;pwn\u0007`,
		"a\rb\x7f":                           `a\u000db\u007f`,
		"c1 \u009b2J, ü and 日本":              `c1 \u009b2J, ü and 日本`,
		"bidi \u202e and \u2066, zw \u200b":  `bidi \u202e and \u2066, zw \u200b`,
	} {
		var b bytes.Buffer
		n, err := safeWriter{w: &b}.Write([]byte(in))
		if err != nil || n != len(in) || b.String() != want {
			t.Errorf("%q: wrote %q (%d, %v), want %q", in, b.String(), n, err, want)
		}
	}
	// JSON stays valid and decodes to the same text.
	const text = "del\x7f c1\u0085 rlo\u202e tag\U000e0041"
	in, _ := json.Marshal(map[string]string{"v": text})
	var j bytes.Buffer
	_, _ = safeWriter{w: &j}.Write(in)
	var v struct{ V string }
	if err := json.Unmarshal(j.Bytes(), &v); err != nil || v.V != text || strings.ContainsRune(j.String(), '\u202e') {
		t.Errorf("JSON through safeWriter: %q -> %q, %v", j.String(), v.V, err)
	}
	var b bytes.Buffer
	_, _ = safeWriter{w: &b, keepCR: true}.Write([]byte("\r50%"))
	if b.String() != "\r50%" {
		t.Errorf("progress line: %q", b.String())
	}
}

// TestRenderOrderHostileReason: a decline reason with CR LF stays on its line, escaped,
// as sagactl order prints it (renderOrder through the safeWriter run puts on stdout).
func TestRenderOrderHostileReason(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o := Order{ID: "0193-abc", CustomerID: "c-1\u202e", Amount: 4200, Items: []Item{{"sku-1\n", 1}}, State: "REJECTED",
		Reason: "x\r\nFAKE LINE", CreatedAt: t0,
		History: []Transition{{From: "PENDING", To: "REJECTED", CauseEventType: "payment.declined", CauseEventID: "e\nFAKE ROW", At: t0}}}
	var b bytes.Buffer
	if err := renderOrder(safeWriter{w: &b}, o, t0); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"reason    x\\u000d\\u000aFAKE LINE\n", "customer  c-1\\u202e\n", "items     sku-1\\u000a x1\n", "e\\u000aFAKE ROW"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	assertNoFakeLine(t, out)
}

// assertNoFakeLine fails if a line of out starts with FAKE or holds a raw carriage
// return or bidi override.
func assertNoFakeLine(t *testing.T, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "FAKE") || strings.ContainsAny(l, "\r\u202e") {
			t.Errorf("hostile text reached the terminal as it is: %q in\n%s", l, out)
		}
	}
}

// TestDLQHostileFields: a dead letter whose key, header and error carry newlines, a CR
// and U+202E adds no row to dlq list and no line to dlq show; -json keeps the values.
func TestDLQHostileFields(t *testing.T) {
	brokers := testenv.Kafka(t)
	source := testenv.Topic(t, brokers, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, consumer.DeadLetterTopic(source)); err != nil {
		t.Fatal(err)
	}
	const key = "order-1\n0:99  2026-01-01T00:00:00Z  FAKE ROW"
	ev, err := event.New("order", "order.created", key, map[string]any{"note": "\u202eevil"})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := event.ToRecord(source, ev)
	if err != nil {
		t.Fatal(err)
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "x-note\nFAKE HEADER", Value: []byte("v\r\u202eFAKE")})
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	h := consumer.DeadLetter(cl)(func(context.Context, *consumer.Message) error {
		return consumer.Permanent(errors.New("declined\r\nFAKE LINE \u202eevil"))
	})
	if err := h(ctx, &consumer.Message{Record: rec, Group: "payment", Attempt: 1}); err != nil {
		t.Fatal(err)
	}

	code, out, errs := sagactl(t, brokers, "dlq", "list", source)
	if code != 0 {
		t.Fatalf("dlq list: exit %d: %s", code, errs)
	}
	// The header row, one record, a blank line and the summary.
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 4 || !strings.Contains(lines[1], `order-1\u000a0:99`) {
		t.Errorf("dlq list: %d lines, want 4 with the key escaped on the record's row:\n%s", len(lines), out)
	}
	assertNoFakeLine(t, out)

	code, out, errs = sagactl(t, brokers, "dlq", "show", source, "0:0")
	if code != 0 {
		t.Fatalf("dlq show: exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"key        order-1\\u000a0:99  2026-01-01T00:00:00Z  FAKE ROW\n",
		"error      declined\\u000d\\u000aFAKE LINE \\u202eevil\n",
		"  x-note\\u000aFAKE HEADER: v\\u000d\\u202eFAKE\n",
		`\u202eevil`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dlq show lacks %q:\n%s", want, out)
		}
	}
	assertNoFakeLine(t, out)

	code, out, errs = sagactl(t, brokers, "dlq", "show", source, "0:0", "-json")
	var r dlqRecord
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.Key != key || strings.ContainsRune(out, '\u202e') {
		t.Errorf("dlq show -json: exit %d, %v, key %q; want the key as it is, U+202E escaped in the JSON: %s%s", code, err, r.Key, out, errs)
	}
}
