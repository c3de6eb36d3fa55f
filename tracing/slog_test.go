package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"testing/slogtest"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/tracing"
)

// The wrapper keeps slog's handler contract (groups, attrs, empty groups,
// zero time...), checked by the standard library's conformance suite.
func TestLogHandlerConformance(t *testing.T) {
	var buf bytes.Buffer
	h := tracing.NewLogHandler(slog.NewJSONHandler(&buf, nil))
	results := func() []map[string]any {
		var out []map[string]any
		for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("bad JSON line %q: %v", line, err)
			}
			out = append(out, m)
		}
		return out
	}
	if err := slogtest.TestHandler(h, results); err != nil {
		t.Fatal(err)
	}
}

func logJSON(t *testing.T, log func(*slog.Logger)) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	log(slog.New(tracing.NewLogHandler(slog.NewJSONHandler(&buf, nil))))
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("log output %q: %v", buf.String(), err)
	}
	for _, k := range []string{"trace_id", "span_id", "correlation_id"} {
		if n := bytes.Count(buf.Bytes(), []byte(`"`+k+`":`)); n > 1 {
			t.Errorf("key %s appears %d times in %s", k, n, buf.Bytes())
		}
	}
	return m
}

func TestLogHandlerAddsIDs(t *testing.T) {
	tp, _ := newRecorder(t)
	ctx := tracing.WithEntity(tracing.WithCorrelationID(context.Background(), "o-1"), "order.id", "o-1")
	ctx, span := tp.Tracer("t").Start(ctx, "op")
	defer span.End()
	sc := span.SpanContext()

	tests := []struct {
		name string
		log  func(*slog.Logger)
		want map[string]any
	}{
		{"plain", func(l *slog.Logger) { l.InfoContext(ctx, "hi", "k", "v") }, map[string]any{
			"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String(),
			"correlation_id": "o-1", "order.id": "o-1", "k": "v",
		}},
		{"ids stay top-level under WithGroup", func(l *slog.Logger) {
			l.With("a", 1).WithGroup("g").With("b", 2).InfoContext(ctx, "hi", "c", 3)
		}, map[string]any{
			"trace_id": sc.TraceID().String(), "correlation_id": "o-1", "a": 1.0,
			"g": map[string]any{"b": 2.0, "c": 3.0},
		}},
		{"a key the record already has is not repeated", func(l *slog.Logger) {
			l.With("trace_id", "mine").InfoContext(ctx, "hi", "correlation_id", "explicit")
		}, map[string]any{"trace_id": "mine", "correlation_id": "explicit", "span_id": sc.SpanID().String()}},
		{"no context, no ids", func(l *slog.Logger) { l.Info("hi", "k", "v") }, map[string]any{
			"k": "v", "trace_id": nil, "correlation_id": nil,
		}},
		{"correlation from baggage only", func(l *slog.Logger) {
			// What a consumer sees after extracting a record that carries
			// baggage but no traceparent.
			r := &kgo.Record{Headers: hdrs("baggage", "saga.correlation_id=o-2")}
			l.InfoContext(tracing.Extract(context.Background(), r), "hi")
		}, map[string]any{"correlation_id": "o-2", "trace_id": nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := logJSON(t, tt.log)
			for k, want := range tt.want {
				g, ok := got[k]
				if want == nil {
					if ok {
						t.Errorf("%s = %v, want absent", k, g)
					}
					continue
				}
				if b1, _ := json.Marshal(g); string(b1) != mustJSON(want) {
					t.Errorf("%s = %s, want %s (record %v)", k, b1, mustJSON(want), got)
				}
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
