package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
)

// AttrCorrelationID is the span attribute (and log key) that carries the saga's
// correlation id, so Jaeger can find every span of one saga by tag.
const AttrCorrelationID = "saga.correlation_id"

// BaggageCorrelationID is the W3C baggage member that carries the correlation
// id across process boundaries, so that services reached by HTTP or Kafka
// without choreo's event headers (or through other OpenTelemetry
// instrumentation) still know the saga.
const BaggageCorrelationID = AttrCorrelationID

type correlationKey struct{}

type entityKey struct{}

type entity struct{ attr, id string }

// WithCorrelationID returns ctx carrying the saga's correlation id, both as a
// context value and as the baggage member [BaggageCorrelationID] (which
// [Inject] writes to outgoing records and otelhttp to outgoing requests). An
// empty id leaves ctx unchanged.
func WithCorrelationID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	ctx = context.WithValue(ctx, correlationKey{}, id)
	if m, err := baggage.NewMemberRaw(BaggageCorrelationID, id); err == nil {
		if b, err := baggage.FromContext(ctx).SetMember(m); err == nil {
			ctx = baggage.ContextWithBaggage(ctx, b)
		}
	}
	// An id that baggage cannot carry (over its 8 KiB limit) still travels in
	// the ce_correlationid event header; only the baggage copy is skipped.
	return ctx
}

// CorrelationID returns the correlation id carried by ctx: the one set by
// [WithCorrelationID], else the [BaggageCorrelationID] baggage member (e.g.
// extracted from an incoming record or request), else "".
func CorrelationID(ctx context.Context) string {
	if id, _ := ctx.Value(correlationKey{}).(string); id != "" {
		return id
	}
	return baggage.FromContext(ctx).Member(BaggageCorrelationID).Value()
}

// WithEntity returns ctx carrying the id of the entity being worked on, under the span
// attribute name attr (e.g. "order.id"). The entity stays in-process: it is
// not added to baggage.
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

// AnnotateSpan sets [SpanAttributes] of ctx on the span in ctx. Spans started
// after WithCorrelationID/WithEntity get them automatically (see
// [CorrelationProcessor]); call this for a span that was started before the
// ids were known, such as the HTTP server span of the request that creates
// the order, or a consumer span before the event was decoded.
func AnnotateSpan(ctx context.Context) {
	if attrs := SpanAttributes(ctx); len(attrs) > 0 {
		trace.SpanFromContext(ctx).SetAttributes(attrs...)
	}
}
