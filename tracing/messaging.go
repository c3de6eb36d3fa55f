package tracing

import (
	"context"
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/event"
)

// instrumentationName is the instrumentation scope of the spans this package
// starts.
const instrumentationName = "github.com/choreo-saga/choreo/tracing"

// Kafka starts producer and consumer spans for Kafka records following the
// OpenTelemetry messaging semantic conventions (messaging.system=kafka,
// messaging.destination.name, messaging.operation.type/name,
// messaging.destination.partition.id, messaging.kafka.offset,
// messaging.consumer.group.name, messaging.message.id from the CloudEvents
// ce_id header, messaging.kafka.message.key), and carries the trace context
// in the record headers with the W3C propagator.
//
// Unlike franz-go's plugin/kotel hooks, which open a span per record when the
// client buffers it, Kafka lets the caller decide where the span sits: the
// outbox relay parents the send span on the trace context stored with the row,
// and the consumer parents the process span directly on the producer's span,
// so one saga stays one trace. Its headers are plain W3C and interoperate
// with kotel both ways.
type Kafka struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator // nil: defaultPropagator at each call
}

// NewKafka returns a [Kafka] span helper using the tracer provider and
// propagator of opts ([WithTracerProvider],
// [WithPropagator]). Records without trace context start new traces
// ([WithRootSpans] is implied).
func NewKafka(opts ...InstrumentOption) *Kafka {
	c := instrumentConfig{}
	for _, o := range opts {
		o(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	return &Kafka{
		tracer: c.tp.Tracer(instrumentationName, trace.WithSchemaURL(semconv.SchemaURL)),
		prop:   c.prop,
	}
}

func (k *Kafka) propagator() propagation.TextMapPropagator {
	if k.prop != nil {
		return k.prop
	}
	return defaultPropagator()
}

// StartSend starts a producer span named "send <topic>" as a child of ctx and
// injects its context into r's headers (replacing any trace headers already
// there). r.Topic must be set. Call [EndSend] once the broker acknowledged
// (or failed) the record. The span also carries the correlation id and entity attribute of ctx.
// The attributes are set after the span started, and only if it records, so
// a sampler does not see them and an unrecorded span costs no attribute work.
func (k *Kafka) StartSend(ctx context.Context, r *kgo.Record) (context.Context, trace.Span) {
	ctx, span := k.tracer.Start(ctx, "send "+r.Topic, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		attrs := k.recordAttrs(r, semconv.MessagingOperationTypeSend, "send", false)
		span.SetAttributes(append(attrs, spanAttributes(ctx)...)...)
	}
	k.propagator().Inject(ctx, RecordCarrier{Record: r})
	return ctx, span
}

// EndSend records the partition and offset the broker assigned to r (or err)
// on span and ends it. Use it from a kgo produce promise.
func EndSend(span trace.Span, r *kgo.Record, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(
			semconv.MessagingDestinationPartitionID(strconv.FormatInt(int64(r.Partition), 10)),
			semconv.MessagingKafkaOffset(int(r.Offset)),
		)
	}
	span.End()
}

// StartProcess extracts the trace context from r's headers into ctx and
// starts a consumer span named "process <topic>" as its child, with the
// partition, offset and consumer group of the fetched record. When r carries
// no trace context the span starts a new trace. The span also carries
// the correlation id and entity attribute of ctx; attributes added to the context later (e.g. the
// correlation id once the event is decoded) can be set with
// [AnnotateSpan]. As with [Kafka.StartSend], the attributes are set only on a
// recording span.
func (k *Kafka) StartProcess(ctx context.Context, r *kgo.Record, group string) (context.Context, trace.Span) {
	ctx = k.propagator().Extract(ctx, RecordCarrier{Record: r})
	ctx, span := k.tracer.Start(ctx, "process "+r.Topic, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		attrs := k.recordAttrs(r, semconv.MessagingOperationTypeProcess, "process", true)
		if group != "" {
			attrs = append(attrs, semconv.MessagingConsumerGroupName(group))
		}
		span.SetAttributes(append(attrs, spanAttributes(ctx)...)...)
	}
	return ctx, span
}

// recordAttrs returns the messaging attributes known for r. fetched says r
// came from the broker, so its partition and offset are meaningful.
func (k *Kafka) recordAttrs(r *kgo.Record, op attribute.KeyValue, opName string, fetched bool) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs,
		semconv.MessagingSystemKafka,
		semconv.MessagingDestinationName(r.Topic),
		op,
		semconv.MessagingOperationName(opName),
	)
	if fetched {
		attrs = append(attrs,
			semconv.MessagingDestinationPartitionID(strconv.FormatInt(int64(r.Partition), 10)),
			semconv.MessagingKafkaOffset(int(r.Offset)),
		)
	}
	if id := (RecordCarrier{Record: r}).Get(event.HeaderID); id != "" {
		attrs = append(attrs, semconv.MessagingMessageID(id))
	}
	if len(r.Key) > 0 && utf8.Valid(r.Key) {
		attrs = append(attrs, semconv.MessagingKafkaMessageKey(string(r.Key)))
	}
	if r.Key != nil && r.Value == nil {
		attrs = append(attrs, semconv.MessagingKafkaMessageTombstone(true))
	}
	if len(r.Value) > 0 {
		attrs = append(attrs, semconv.MessagingMessageBodySize(len(r.Value)))
	}
	return attrs
}
