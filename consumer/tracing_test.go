package consumer

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/tracing"
)

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// The consumer span continues the producer's trace, follows the messaging conventions
// and records the outcome and errors.
func TestTracing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prop := propagation.TraceContext{}

	parentCtx, parent := tp.Tracer("test").Start(context.Background(), "send orders")
	r := eventRecord(t, "orders", "order.created", "o-1", seqPayload{Seq: 1})
	r.Partition, r.Offset = 3, 42
	prop.Inject(parentCtx, tracing.RecordCarrier{Record: r})
	parent.End()

	mw := traceRecord(tracing.WithTracerProvider(tp), tracing.WithPropagator(prop))
	boom := errors.New("boom")
	tests := []struct {
		name        string
		h           Handler
		wantOutcome string
		wantErr     bool
	}{
		{"handled", func(_ context.Context, m *Message) error { m.Event.Type, m.Decoded = "order.created", true; return nil }, "handled", false},
		{"dead-lettered", func(_ context.Context, m *Message) error { m.Outcome = OutcomeDeadLettered; return nil }, "dead_lettered", false},
		{"failed", func(context.Context, *Message) error { return boom }, "failed", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var inner trace.SpanContext
			h := mw(func(ctx context.Context, m *Message) error {
				inner = trace.SpanContextFromContext(ctx)
				return tt.h(ctx, m)
			})
			if err := h(context.Background(), &Message{Record: r, Group: "payments"}); (err != nil) != tt.wantErr {
				t.Fatalf("err %v", err)
			}
			spans := rec.Ended()
			s := spans[len(spans)-1]
			if s.Name() != "process orders" || s.SpanKind() != trace.SpanKindConsumer {
				t.Errorf("span %q kind %v", s.Name(), s.SpanKind())
			}
			if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
				t.Error("consumer span is not the producer span's child")
			}
			if inner.SpanID() != s.SpanContext().SpanID() {
				t.Error("handlers do not run in the consumer span")
			}
			a := attrs(s)
			for k, want := range map[attribute.Key]string{
				"messaging.system":                   "kafka",
				"messaging.operation.type":           "process",
				"messaging.destination.name":         "orders",
				"messaging.destination.partition.id": "3",
				"messaging.consumer.group.name":      "payments",
				"messaging.kafka.message.key":        "o-1",
				"messaging.message.id":               header(r, event.HeaderID),
				"choreo.outcome":                     tt.wantOutcome,
			} {
				if got := a[k].Emit(); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if a["messaging.kafka.offset"].AsInt64() != 42 {
				t.Errorf("offset attribute %v", a["messaging.kafka.offset"])
			}
			if tt.wantErr != (s.Status().Code == codes.Error) {
				t.Errorf("status %v", s.Status())
			}
		})
	}
}

func TestTracingWithoutContextStartsTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	h := traceRecord(tracing.WithTracerProvider(tp), tracing.WithPropagator(propagation.TraceContext{}))(
		func(context.Context, *Message) error { return nil })
	if err := h(context.Background(), &Message{Record: &kgo.Record{Topic: "orders"}}); err != nil {
		t.Fatal(err)
	}
	if s := rec.Ended(); len(s) != 1 || s[0].Parent().IsValid() {
		t.Fatalf("want one root span, got %d", len(s))
	}
}
