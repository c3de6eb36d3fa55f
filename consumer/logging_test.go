package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/tracing"
)

func TestLogging(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name      string
		h         Handler
		wantLevel string
		wantKeys  map[string]any
	}{
		{"handled", func(context.Context, *Message) error { return nil }, "DEBUG", map[string]any{"outcome": "handled"}},
		{"dead-lettered", func(_ context.Context, m *Message) error {
			m.Outcome, m.DeadLetterCause = OutcomeDeadLettered, Permanent(boom)
			return nil
		}, "WARN", map[string]any{"outcome": "dead_lettered", "reason": ReasonPermanent, "error": "boom"}},
		{"failed", func(context.Context, *Message) error { return boom }, "ERROR", map[string]any{"outcome": "failed", "error": "boom"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			ctx := tracing.WithCorrelationID(context.Background(), "saga-1")
			m := &Message{Record: &kgo.Record{Topic: "orders", Partition: 2, Offset: 9, Key: []byte("o-1")}, Group: "payments"}
			_ = logOutcome(l)(tt.h)(ctx, m)
			var line map[string]any
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatalf("log line %q: %v", buf.String(), err)
			}
			want := map[string]any{
				"level": tt.wantLevel, "group": "payments", "topic": "orders", "partition": 2.0,
				"offset": 9.0, "key": "o-1", "correlation_id": "saga-1", "attempts": 1.0,
			}
			for k, v := range tt.wantKeys {
				want[k] = v
			}
			for k, v := range want {
				if line[k] != v {
					t.Errorf("%s = %v, want %v", k, line[k], v)
				}
			}
		})
	}
	// Below the logger's level nothing is formatted.
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	_ = logOutcome(l)(func(context.Context, *Message) error { return nil })(context.Background(), &Message{Record: &kgo.Record{}})
	if buf.Len() != 0 {
		t.Errorf("handled record logged at Info level: %s", buf.String())
	}
}
