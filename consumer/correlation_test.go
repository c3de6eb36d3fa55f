package consumer

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/tracing"
)

func TestCorrelationID(t *testing.T) {
	withHeaders := &kgo.Record{Key: []byte("key-1"), Headers: []kgo.RecordHeader{
		{Key: event.HeaderCorrelationID, Value: []byte("saga-7")},
		{Key: event.HeaderSubject, Value: []byte("o-7")},
	}}
	tests := []struct {
		name       string
		rec        *kgo.Record
		attr       string
		wantCorr   string
		wantAttr   string
		wantEntity string
	}{
		{"headers", withHeaders, "order.id", "saga-7", "order.id", "o-7"},
		{"key fallback, default attribute", &kgo.Record{Key: []byte("key-2")}, "", "", "entity.id", "key-2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			ctx, span := tp.Tracer("test").Start(context.Background(), "process")
			err := correlate(tt.attr)(func(ctx context.Context, _ *Message) error {
				if got := tracing.CorrelationID(ctx); got != tt.wantCorr {
					t.Errorf("correlation id %q, want %q", got, tt.wantCorr)
				}
				if attr, id := tracing.Entity(ctx); attr != tt.wantAttr || id != tt.wantEntity {
					t.Errorf("entity %s=%s, want %s=%s", attr, id, tt.wantAttr, tt.wantEntity)
				}
				return nil
			})(ctx, &Message{Record: tt.rec})
			if err != nil {
				t.Fatal(err)
			}
			span.End()
			a := attrs(rec.Ended()[0])
			if got := a[tracing.AttrCorrelationID].Emit(); got != tt.wantCorr {
				t.Errorf("span %s = %q, want %q", tracing.AttrCorrelationID, got, tt.wantCorr)
			}
			if got := a[attributeKey(tt.wantAttr)].Emit(); got != tt.wantEntity {
				t.Errorf("span %s = %q, want %q", tt.wantAttr, got, tt.wantEntity)
			}
		})
	}
}

func attributeKey(s string) attribute.Key { return attribute.Key(s) }
