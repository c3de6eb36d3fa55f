package consumer

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
)

// Metric names recorded by Metrics.
const (
	// MetricProcessDuration is the OpenTelemetry messaging histogram of handling time
	// (seconds), retries included.
	MetricProcessDuration = "messaging.process.duration"
	// MetricOutcomes counts settled and failed handlings by choreo.outcome.
	MetricOutcomes = "choreo.consumer.outcomes"
	// MetricAttempts is a histogram of the attempts a handling took (Retry).
	MetricAttempts = "choreo.consumer.attempts"
	// MetricBatchSize is a histogram of the records each committed batch held (batch
	// mode, StandardBatch).
	MetricBatchSize = "choreo.consumer.batch.size"
)

var (
	outcomeKey   = attribute.Key("choreo.outcome")
	eventTypeKey = attribute.Key("choreo.event.type")
	// upcastFromKey and schemaVersionKey describe an upcast event on its span.
	upcastFromKey    = attribute.Key("choreo.event.upcast_from")
	schemaVersionKey = attribute.Key("choreo.event.schema_version")
)

// measure records, per handled record, its duration (MetricProcessDuration), its outcome
// (MetricOutcomes) and its attempts (MetricAttempts), with the messaging system,
// destination, partition, consumer group, outcome and, on failure, error.type as
// attributes. Place it outside DeadLetter so dead-lettered records are counted as such.
func measure(mp metric.MeterProvider) (Middleware, error) {
	ins, err := newInstruments(mp)
	if err != nil {
		return nil, err
	}
	return ins.middleware(), nil
}

// middleware is Metrics with its instruments created: Standard passes the ones it
// resolved, which StandardBatch records to as well.
func (ins *instruments) middleware() Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			start := time.Now()
			err := next(ctx, m)
			ins.record(ctx, m, err, time.Since(start))
			return err
		}
	}
}

type instruments struct {
	duration metric.Float64Histogram
	outcomes metric.Int64Counter
	attempts metric.Int64Histogram
	batch    metric.Int64Histogram
}

func newInstruments(mp metric.MeterProvider) (*instruments, error) {
	meter := mp.Meter(instrumentationName)
	duration, err := meter.Float64Histogram(MetricProcessDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of handling one record, retries included."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
	if err != nil {
		return nil, fmt.Errorf("consumer: %s histogram: %w", MetricProcessDuration, err)
	}
	outcomes, err := meter.Int64Counter(MetricOutcomes,
		metric.WithUnit("{message}"),
		metric.WithDescription("Records handled, by outcome."))
	if err != nil {
		return nil, fmt.Errorf("consumer: %s counter: %w", MetricOutcomes, err)
	}
	attempts, err := meter.Int64Histogram(MetricAttempts,
		metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts one handling took."),
		metric.WithExplicitBucketBoundaries(1, 2, 3, 5, 8, 13))
	if err != nil {
		return nil, fmt.Errorf("consumer: %s histogram: %w", MetricAttempts, err)
	}
	batch, err := meter.Int64Histogram(MetricBatchSize,
		metric.WithUnit("{message}"),
		metric.WithDescription("Records handled in one transaction by a committed batch."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256))
	if err != nil {
		return nil, fmt.Errorf("consumer: %s histogram: %w", MetricBatchSize, err)
	}
	return &instruments{duration: duration, outcomes: outcomes, attempts: attempts, batch: batch}, nil
}

// partitionAttrs names m's messaging system, consumer group, topic and partition.
func partitionAttrs(m *Message) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemKafka,
		semconv.MessagingConsumerGroupName(m.Group),
		semconv.MessagingDestinationName(m.Record.Topic),
		semconv.MessagingDestinationPartitionID(strconv.Itoa(int(m.Record.Partition))),
	}
}

// recordBatch records the size of a committed batch (ms, all of one partition).
func (ins *instruments) recordBatch(ctx context.Context, ms []*Message) {
	ins.batch.Record(ctx, int64(len(ms)), metric.WithAttributeSet(attribute.NewSet(partitionAttrs(ms[0])...)))
}

// record records one handled record: its duration, outcome and attempts. The Metrics
// middleware and StandardBatch both call it.
func (ins *instruments) record(ctx context.Context, m *Message, err error, elapsed time.Duration) {
	attrs := append(partitionAttrs(m), outcomeKey.String(string(m.outcome(err))))
	if err != nil {
		attrs = append(attrs, semconv.ErrorTypeKey.String(fmt.Sprintf("%T", err)))
	}
	set := metric.WithAttributeSet(attribute.NewSet(attrs...))
	ins.duration.Record(ctx, elapsed.Seconds(), set)
	ins.outcomes.Add(ctx, 1, set)
	if m.Attempt > 0 {
		ins.attempts.Record(ctx, int64(m.Attempt), set)
	}
}
