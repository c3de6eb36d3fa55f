package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
)

// AttrCorrelationID is the span attribute (and log key) that carries the saga's
// correlation id, so Jaeger can find every span of one saga by tag.
const AttrCorrelationID = "saga.correlation_id"

type correlationKey struct{}

type entityKey struct{}

type entity struct{ attr, id string }

// WithCorrelationID returns ctx carrying the saga's correlation id.
func WithCorrelationID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, correlationKey{}, id)
}

// CorrelationID returns the correlation id carried by ctx, or "".
func CorrelationID(ctx context.Context) string {
	id, _ := ctx.Value(correlationKey{}).(string)
	return id
}

// WithEntity returns ctx carrying the id of the entity being worked on, under the span
// attribute name attr (e.g. "order.id").
func WithEntity(ctx context.Context, attr, id string) context.Context {
	return context.WithValue(ctx, entityKey{}, entity{attr: attr, id: id})
}

// Entity returns the entity attribute name and id carried by ctx, or two empty strings.
func Entity(ctx context.Context) (attr, id string) {
	e, _ := ctx.Value(entityKey{}).(entity)
	return e.attr, e.id
}

// SpanAttributes returns the correlation id and entity attributes carried by ctx, ready
// for span.SetAttributes.
func SpanAttributes(ctx context.Context) []attribute.KeyValue {
	var kvs []attribute.KeyValue
	if id := CorrelationID(ctx); id != "" {
		kvs = append(kvs, attribute.String(AttrCorrelationID, id))
	}
	if attr, id := Entity(ctx); attr != "" && id != "" {
		kvs = append(kvs, attribute.String(attr, id))
	}
	return kvs
}
