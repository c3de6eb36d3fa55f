package consumer

import (
	"context"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/tracing"
)

// correlate puts the record's saga correlation id (header ce_correlationid) and entity
// id (ce_subject, else the record key) into the context with tracing.WithCorrelationID and
// tracing.WithEntity(entityAttr, id), and adds them to the current span
// (tracing.AnnotateSpan), so that spans, logs (Logging) and outgoing events
// (outbox.Enqueue) of this handling carry them. entityAttr names the entity attribute,
// e.g. "order.id"; empty means DefaultEntityAttribute. Place it inside Tracing.
func correlate(entityAttr string) Middleware {
	if entityAttr == "" {
		entityAttr = DefaultEntityAttribute
	}
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			return next(withCorrelation(ctx, m, entityAttr), m)
		}
	}
}

// withCorrelation is Correlate for one message; StandardBatch calls it per record.
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
	tracing.AnnotateSpan(ctx)
	return ctx
}
