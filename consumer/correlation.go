package consumer

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/tracing"
)

// CorrelationID puts the record's saga correlation id (header ce_correlationid) and entity
// id (ce_subject, else the record key) into the context with tracing.WithCorrelationID and
// tracing.WithEntity(entityAttr, id), and adds tracing.SpanAttributes to the current span,
// so that spans, logs (Logging) and outgoing events (outbox.Enqueue) of this handling
// carry them. entityAttr names the entity attribute, e.g. "order.id"; empty means
// "entity.id". Place it inside Tracing.
func CorrelationID(entityAttr string) Middleware {
	if entityAttr == "" {
		entityAttr = "entity.id"
	}
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			return next(withCorrelation(ctx, m, entityAttr), m)
		}
	}
}

func withCorrelation(ctx context.Context, m *Message, entityAttr string) context.Context {
	if id := m.Header(event.HeaderCorrelationID); id != "" {
		ctx = tracing.WithCorrelationID(ctx, id)
	}
	entity := m.Header(event.HeaderSubject)
	if entity == "" {
		entity = string(m.Record.Key)
	}
	if entity != "" {
		ctx = tracing.WithEntity(ctx, entityAttr, entity)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(tracing.SpanAttributes(ctx)...)
	}
	return ctx
}
