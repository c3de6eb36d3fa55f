package tracing

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"
)

func TestErrorLogRateLimitsByMessage(t *testing.T) {
	var buf bytes.Buffer
	e := newErrorLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e.now = func() time.Time { return now }

	down := errors.New("traces export: connection refused")
	for range 5 {
		e.Handle(down)
	}
	e.Handle(errors.New("metrics export: deadline exceeded"))
	e.Handle(nil)
	now = now.Add(errorLogInterval)
	e.Handle(down)

	type line struct {
		Level    string `json:"level"`
		Error    string `json:"error"`
		Repeated int    `json:"repeated"`
	}
	var got []line
	for _, b := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var l line
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		got = append(got, l)
	}
	want := []line{
		{"WARN", "traces export: connection refused", 0},
		{"WARN", "metrics export: deadline exceeded", 0},
		{"WARN", "traces export: connection refused", 4},
	}
	if len(got) != len(want) {
		t.Fatalf("logged %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestErrorLogForgetsPastTheBound(t *testing.T) {
	var buf bytes.Buffer
	e := newErrorLog(slog.New(slog.NewTextHandler(&buf, nil)))
	for i := range maxErrorKeys + 10 {
		e.Handle(errors.New(string(rune('a'+i%26)) + time.Duration(i).String()))
	}
	if n := len(e.seen); n > maxErrorKeys {
		t.Fatalf("%d messages remembered, bound is %d", n, maxErrorKeys)
	}
}
