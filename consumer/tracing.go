package consumer

import (
	"context"

	"go.opentelemetry.io/otel/codes"

	"github.com/choreo-saga/choreo/tracing"
)

// Tracing extracts the W3C trace context from the record's headers and runs the handlers
// it wraps in a consumer span named "process <topic>", a child of the producer's span so
// that one saga is one trace (tracing.Kafka.StartProcess: OpenTelemetry messaging
// attributes, consumer group, offset, key, message id). When the handlers return, the
// span gets the outcome (choreo.outcome), the event type once decoded
// (choreo.event.type), and the error, if any. opts select the tracer provider and
// propagator (tracing.WithTracerProvider, tracing.WithTelemetry; default the otel
// globals).
func Tracing(opts ...tracing.InstrumentOption) Middleware {
	k := tracing.NewKafka(opts...)
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			ctx, span := k.StartProcess(ctx, m.Record, m.Group)
			defer span.End()
			err := next(ctx, m)
			span.SetAttributes(outcomeKey.String(string(m.outcome(err))))
			if m.Decoded {
				span.SetAttributes(eventTypeKey.String(m.Event.Type))
			}
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return err
		}
	}
}
