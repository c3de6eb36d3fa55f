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

// baggageCorrelationID is the W3C baggage member that carries the correlation
// id across process boundaries, so that services reached by HTTP or Kafka
// without choreo's event headers (or through other OpenTelemetry
// instrumentation) still know the saga.
const baggageCorrelationID = AttrCorrelationID

// sagaKey holds a *saga: one context value for both ids, with the span
// attributes built once per WithCorrelationID/WithEntity call rather than
// once per span (CorrelationProcessor reads them for every span).
type sagaKey struct{}

type saga struct {
	correlation          string
	entityAttr, entityID string
	attrs                []attribute.KeyValue // nil unless correlation is set
}

func sagaFrom(ctx context.Context) *saga {
	s, _ := ctx.Value(sagaKey{}).(*saga)
	return s
}

// with returns a copy of s (which may be nil) changed by f, with its
// attributes rebuilt.
func (s *saga) with(f func(*saga)) *saga {
	var n saga
	if s != nil {
		n = *s
	}
	f(&n)
	n.attrs = nil
	if n.correlation != "" {
		n.attrs = buildAttrs(n.correlation, n.entityAttr, n.entityID)
	}
	return &n
}

func buildAttrs(correlation, entityAttr, entityID string) []attribute.KeyValue {
	kvs := make([]attribute.KeyValue, 0, 2)
	if correlation != "" {
		kvs = append(kvs, attribute.String(AttrCorrelationID, correlation))
	}
	if entityAttr != "" && entityID != "" {
		kvs = append(kvs, attribute.String(entityAttr, entityID))
	}
	return kvs
}

// WithCorrelationID returns ctx carrying the saga's correlation id, both as a
// context value and as the baggage member named like [AttrCorrelationID] (which
// [Inject] writes to outgoing records and otelhttp to outgoing requests). An
// empty id leaves ctx unchanged.
func WithCorrelationID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	ctx = context.WithValue(ctx, sagaKey{}, sagaFrom(ctx).with(func(s *saga) { s.correlation = id }))
	if m, err := baggage.NewMemberRaw(baggageCorrelationID, id); err == nil {
		if b, err := baggage.FromContext(ctx).SetMember(m); err == nil {
			ctx = baggage.ContextWithBaggage(ctx, b)
		}
	}
	// An id that baggage cannot carry (over its 8 KiB limit) still travels in
	// the ce_correlationid event header; only the baggage copy is skipped.
	return ctx
}

// CorrelationID returns the correlation id carried by ctx: the one set by
// [WithCorrelationID], else the baggage member of that name (e.g.
// extracted from an incoming record or request), else "".
func CorrelationID(ctx context.Context) string {
	if s := sagaFrom(ctx); s != nil && s.correlation != "" {
		return s.correlation
	}
	return baggage.FromContext(ctx).Member(baggageCorrelationID).Value()
}

// WithEntity returns ctx carrying the id of the entity being worked on, under the span
// attribute name attr (e.g. "order.id"). The entity stays in-process: it is
// not added to baggage.
func WithEntity(ctx context.Context, attr, id string) context.Context {
	return context.WithValue(ctx, sagaKey{}, sagaFrom(ctx).with(func(s *saga) { s.entityAttr, s.entityID = attr, id }))
}

// Entity returns the entity attribute name and id carried by ctx, or two empty strings.
func Entity(ctx context.Context) (attr, id string) {
	if s := sagaFrom(ctx); s != nil {
		return s.entityAttr, s.entityID
	}
	return "", ""
}

// spanAttributes returns the correlation id and entity attributes carried by ctx, ready
// for span.SetAttributes. The slice may be shared: do not modify its
// elements (appending is safe).
func spanAttributes(ctx context.Context) []attribute.KeyValue {
	s := sagaFrom(ctx)
	if s != nil && s.attrs != nil {
		return s.attrs[:len(s.attrs):len(s.attrs)]
	}
	corr := baggage.FromContext(ctx).Member(baggageCorrelationID).Value()
	var attr, id string
	if s != nil {
		attr, id = s.entityAttr, s.entityID
	}
	if corr == "" && (attr == "" || id == "") {
		return nil
	}
	return buildAttrs(corr, attr, id)
}

// AnnotateSpan sets the correlation id and entity attribute of ctx on the span in ctx. Spans started
// after WithCorrelationID/WithEntity get them automatically (see
// [CorrelationProcessor]); call this for a span that was started before the
// ids were known, such as the HTTP server span of the request that creates
// the order, or a consumer span before the event was decoded.
func AnnotateSpan(ctx context.Context) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if attrs := spanAttributes(ctx); len(attrs) > 0 {
		span.SetAttributes(attrs...)
	}
}
