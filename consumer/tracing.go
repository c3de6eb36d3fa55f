package consumer

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/tracing"
)

// traceRecord extracts the W3C trace context from the record's headers and runs the handlers
// it wraps in a consumer span named "process <topic>", a child of the producer's span so
// that one saga is one trace (tracing.Kafka.StartProcess: OpenTelemetry messaging
// attributes, consumer group, offset, key, message id). When the handlers return, the
// span gets the outcome (choreo.outcome), the event type once decoded
// (choreo.event.type) and, for an event Upcast brought to another schema version, the
// version it arrived at (choreo.event.upcast_from) and the one handled
// (choreo.event.schema_version), and the error, if any. opts select the tracer provider and
// propagator (tracing.WithTracerProvider, tracing.WithPropagator; default the otel
// globals).
func traceRecord(opts ...tracing.InstrumentOption) Middleware {
	return traced(tracing.NewKafka(opts...))
}

// traced is Tracing with its span helper built: Standard passes the one it resolved.
func traced(k *tracing.Kafka) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			ctx, span := k.StartProcess(ctx, m.Record, m.Group)
			defer span.End()
			err := next(ctx, m)
			finishSpan(span, m, err)
			return err
		}
	}
}

// finishSpan sets how m's handling ended on its consumer span: the outcome, the event
// type once decoded, and the error, if any. Tracing and StandardBatch both call it.
func finishSpan(span trace.Span, m *Message, err error) {
	span.SetAttributes(outcomeKey.String(string(m.outcome(err))))
	if m.Decoded {
		span.SetAttributes(eventTypeKey.String(m.Event.Type))
		if m.upcastFrom != 0 {
			span.SetAttributes(upcastFromKey.Int(m.upcastFrom), schemaVersionKey.Int(m.Event.SchemaVersion))
		}
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
