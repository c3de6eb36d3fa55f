package tracing

import (
	"context"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// CorrelationProcessor returns a span processor that copies
// the correlation id and entity attribute of the parent context (saga.correlation_id and the entity
// attribute, e.g. order.id) onto every span when it starts. Because it runs
// inside the SDK, it also covers spans that instrumentation libraries start
// (otelpgx queries, redisotel commands, otelhttp, kotel), so a search by tag
// in Jaeger finds every span of a saga, not only the ones choreo starts.
// [Setup] installs it unless [WithoutCorrelationAttributes] is given; add it
// with sdktrace.WithSpanProcessor to a provider you build yourself.
//
// It is stateless and never blocks; OnEnd, Shutdown and ForceFlush do nothing.
func CorrelationProcessor() sdktrace.SpanProcessor { return correlationProcessor{} }

type correlationProcessor struct{}

func (correlationProcessor) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	if attrs := spanAttributes(parent); len(attrs) > 0 {
		s.SetAttributes(attrs...)
	}
}

func (correlationProcessor) OnEnd(sdktrace.ReadOnlySpan)      {}
func (correlationProcessor) Shutdown(context.Context) error   { return nil }
func (correlationProcessor) ForceFlush(context.Context) error { return nil }
