package outbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// Metric names. Every instrument carries the attribute choreo.outbox.table;
// the per-event ones also carry messaging.destination.name (the topic).
const (
	MetricBacklog      = "choreo.outbox.backlog"          // gauge {row}: rows waiting in the table
	MetricOldestAge    = "choreo.outbox.oldest_age"       // gauge s: age of the oldest waiting row
	MetricLeader       = "choreo.outbox.leader"           // gauge: 1 while this relay leads
	MetricPublished    = "choreo.outbox.published"        // counter {event}: rows acknowledged by the broker
	MetricLatency      = "choreo.outbox.publish.duration" // histogram s: row insert → broker ack
	MetricErrors       = "choreo.outbox.publish.errors"   // counter {event}: failed produce attempts
	MetricDeadLettered = "choreo.outbox.dead_lettered"    // counter {event}: rows moved to the dead-letter table
	MetricDeferred     = "choreo.outbox.deferred"         // counter {event}: rows left for a later round by their topic's max.message.bytes (once per round they wait)
)

type relayMetrics struct {
	meter        metric.Meter
	table        attribute.KeyValue
	published    metric.Int64Counter
	errors       metric.Int64Counter
	deadLettered metric.Int64Counter
	held         metric.Int64Counter
	latency      metric.Float64Histogram
	backlog      metric.Int64ObservableGauge
	oldest       metric.Float64ObservableGauge
	leader       metric.Int64ObservableGauge
	byTopic      sync.Map // topic -> metric.MeasurementOption
}

func newRelayMetrics(m metric.Meter, table string) (*relayMetrics, error) {
	rm := &relayMetrics{meter: m, table: attribute.String("choreo.outbox.table", table)}
	var errs [8]error
	rm.published, errs[0] = m.Int64Counter(MetricPublished, metric.WithUnit("{event}"),
		metric.WithDescription("Outbox rows acknowledged by the broker."))
	rm.errors, errs[1] = m.Int64Counter(MetricErrors, metric.WithUnit("{event}"),
		metric.WithDescription("Produce attempts of outbox rows that failed (they are retried)."))
	rm.deadLettered, errs[2] = m.Int64Counter(MetricDeadLettered, metric.WithUnit("{event}"),
		metric.WithDescription("Outbox rows the broker rejected permanently, moved to the dead-letter table."))
	rm.latency, errs[3] = m.Float64Histogram(MetricLatency, metric.WithUnit("s"),
		metric.WithDescription("Time from an outbox row's insert to the broker's acknowledgement."),
		metric.WithExplicitBucketBoundaries(0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
	rm.backlog, errs[4] = m.Int64ObservableGauge(MetricBacklog, metric.WithUnit("{row}"),
		metric.WithDescription("Outbox rows waiting to be published."))
	rm.oldest, errs[5] = m.Float64ObservableGauge(MetricOldestAge, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest outbox row waiting to be published (0 when empty)."))
	rm.leader, errs[6] = m.Int64ObservableGauge(MetricLeader,
		metric.WithDescription("1 while this relay holds the outbox leader lock, else 0."))
	rm.held, errs[7] = m.Int64Counter(MetricDeferred, metric.WithUnit("{event}"),
		metric.WithDescription("Outbox rows left in the table for a later round because their topic's rows in the round filled its max.message.bytes, which is below the client's ProducerBatchMaxBytes; a row counts once per round it waits."))
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("outbox: metrics: %w", err)
		}
	}
	return rm, nil
}

// topicAttrs returns the attributes of per-event measurements, built once per
// topic (an attribute set sorts and hashes on creation).
func (m *relayMetrics) topicAttrs(topic string) metric.MeasurementOption {
	if o, ok := m.byTopic.Load(topic); ok {
		return o.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(m.table, semconv.MessagingDestinationName(topic)))
	m.byTopic.Store(topic, o)
	return o
}

// observe registers the gauges' callback for the duration of Run. The backlog
// is read through the pool, so a standby reports it too.
func (m *relayMetrics) observe(r *Relay) (func(), error) {
	reg, err := m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		attrs := metric.WithAttributes(m.table)
		var leader int64
		if r.Leader() {
			leader = 1
		}
		o.ObserveInt64(m.leader, leader, attrs)
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var n int64
		var age float64
		err := r.pool.QueryRow(qctx, "SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(created_at))::float8, 0) FROM "+r.names.table).Scan(&n, &age)
		if err != nil {
			return fmt.Errorf("outbox: metrics: backlog: %w", err)
		}
		o.ObserveInt64(m.backlog, n, attrs)
		o.ObserveFloat64(m.oldest, age, attrs)
		return nil
	}, m.backlog, m.oldest, m.leader)
	if err != nil {
		return nil, fmt.Errorf("outbox: metrics: %w", err)
	}
	return func() { _ = reg.Unregister() }, nil
}
