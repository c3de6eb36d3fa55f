package tracker

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// MeterName is the name of the meter the tracker takes from the global meter provider.
const MeterName = "github.com/choreo-saga/choreo/tracker"

type instruments struct {
	indexed, skipped metric.Int64Counter
	escaped, refused metric.Int64Counter
	violations       metric.Int64Counter
	latency          metric.Float64Histogram
	reg              metric.Registration
}

type stepKey struct{ saga, step string }

// snapshot is what the gauges report, as of the last Refresh.
type snapshot struct {
	inFlight map[string]int64
	stuck    map[stepKey]int64
}

func (t *Tracker) initMetrics() error {
	m := t.meter
	if m == nil {
		m = otel.GetMeterProvider().Meter(MeterName)
	}
	var err error
	wrap := func(e error) error { return fmt.Errorf("tracker: metrics: %w", e) }
	if t.inst.indexed, err = m.Int64Counter("choreo.tracker.events.indexed",
		metric.WithDescription("Records newly indexed by the saga tracker")); err != nil {
		return wrap(err)
	}
	if t.inst.skipped, err = m.Int64Counter("choreo.tracker.events.skipped",
		metric.WithDescription("Records not indexed, by reason: no_saga_headers (no correlation id or event type), unstorable (Postgres refused the row, or the batch decompresses past the client's bound)")); err != nil {
		return wrap(err)
	}
	if t.inst.escaped, err = m.Int64Counter("choreo.tracker.events.escaped",
		metric.WithDescription("Records indexed with fields escaped or cut: NUL, invalid UTF-8, or too long")); err != nil {
		return wrap(err)
	}
	if t.inst.refused, err = m.Int64Counter("choreo.tracker.events.refused",
		metric.WithDescription("Records not indexed because the services refuse them (WithTrust), by reason: bad_signature, untrusted, malformed")); err != nil {
		return wrap(err)
	}
	if t.inst.violations, err = m.Int64Counter("choreo.tracker.contract.violations",
		metric.WithDescription("Observed payloads that break a declared schema (WithContracts), by source (undeclared when no service of the catalogue), type, version, consumer (the declaring service) and role (consumes, or produces: the producer broke its own promise)")); err != nil {
		return wrap(err)
	}
	if t.inst.latency, err = m.Float64Histogram("choreo.tracker.saga.duration", metric.WithUnit("s"),
		metric.WithDescription("End-to-end saga latency, from its first start event to its terminal event, per saga")); err != nil {
		return wrap(err)
	}
	inFlight, err := m.Int64ObservableGauge("choreo.tracker.sagas.in_flight",
		metric.WithDescription("Sagas started and not ended (stuck ones included), per saga, as of the last refresh"))
	if err != nil {
		return wrap(err)
	}
	stuck, err := m.Int64ObservableGauge("choreo.tracker.sagas.stuck",
		metric.WithDescription("Stuck sagas per saga and waiting step, as of the last refresh"))
	if err != nil {
		return wrap(err)
	}
	t.inst.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t.mu.Lock()
		defer t.mu.Unlock()
		for saga, n := range t.snap.inFlight {
			o.ObserveInt64(inFlight, n, metric.WithAttributes(attribute.String("saga", saga)))
		}
		for k, n := range t.snap.stuck {
			o.ObserveInt64(stuck, n, metric.WithAttributes(attribute.String("saga", k.saga), attribute.String("step", k.step)))
		}
		return nil
	}, inFlight, stuck)
	if err != nil {
		return wrap(err)
	}
	return nil
}

// Close unregisters the tracker's gauge callback. The tracker's queries keep working.
func (t *Tracker) Close() error {
	if t.inst.reg == nil {
		return nil
	}
	return t.inst.reg.Unregister()
}

// Refresh recomputes what the in-flight and stuck gauges report. Run calls it every
// refresh interval.
func (t *Tracker) Refresh(ctx context.Context) error {
	inFlight, err := t.unendedBySaga(ctx)
	if err != nil {
		return err
	}
	stuck, err := t.stuckBySteps(ctx)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.snap = snapshot{inFlight: inFlight, stuck: stuck}
	t.mu.Unlock()
	return nil
}

// unendedBySaga counts the sagas not ended (in flight or stuck) per kind, every declared
// kind included. It reads only those sagas (a partial index on unended ones), not every
// summary: Run calls it every refresh interval.
func (t *Tracker) unendedBySaga(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	for _, s := range t.cfg.Sagas {
		out[s.Name] = 0
	}
	rows, err := t.db.Query(ctx, `SELECT saga, count(*) FROM `+t.sagasTable()+` WHERE ended IS NULL GROUP BY saga`)
	if err != nil {
		return nil, fmt.Errorf("tracker: unended sagas: %w", err)
	}
	var (
		saga string
		n    int64
	)
	_, err = pgx.ForEachRow(rows, []any{&saga, &n}, func() error { out[saga] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("tracker: unended sagas: %w", err)
	}
	return out, nil
}

// recordLatency records the end-to-end latency of each saga that fresh entries ended,
// from the start times summarize computed for the batch's correlation ids.
func (t *Tracker) recordLatency(ctx context.Context, fresh []entry, starts map[startKey]time.Time) {
	for _, e := range fresh {
		if e.dead {
			continue
		}
		for _, s := range t.cfg.Sagas {
			if !matchAny(s.Terminal, e.typ) {
				continue
			}
			start, ok := starts[startKey{e.corr, s.Name}]
			if !ok || e.at.Before(start) {
				continue
			}
			t.inst.latency.Record(ctx, e.at.Sub(start).Seconds(), metric.WithAttributes(attribute.String("saga", s.Name)))
		}
	}
}

type startKey struct{ corr, saga string }
