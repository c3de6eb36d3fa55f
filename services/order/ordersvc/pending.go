package ordersvc

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/choreo-saga/choreo/services/internal/batchjob"
)

// Saga-level admission (WithMaxPending).
const (
	// DefaultMaxPending is the default ORDER_MAX_PENDING: under 2 s of work at the
	// reference system's measured saturation (~150–180 confirmed orders/s on the shared
	// 2-core machine, docs/benchmarks.md), so an order admitted at the limit waits
	// ~2 s in the saga, while a healthy system (pending = throughput × saga latency, a few
	// dozen orders) never comes near it. Measured against 1000 (5–6 s of work): the same
	// confirmed/s, a third of the latency at saturation, and a shorter first wave when an
	// overload starts (see "Pending limit" in docs/benchmarks.md).
	DefaultMaxPending = 300
	// PendingRefreshInterval is how often the pending count is read from Postgres
	// (RunPendingCounter; less often when the count is slow).
	PendingRefreshInterval = 200 * time.Millisecond
	// PendingRetryAfter is the Retry-After of a POST shed because of the pending limit.
	PendingRetryAfter = time.Second
	// pendingLogInterval is the least time between two "shedding" log lines.
	pendingLogInterval = 10 * time.Second
)

// Metric names of saga-level admission.
const (
	// MetricPending is a gauge of the orders in flight in the saga (PENDING and
	// CANCELLING, in every instance), as of the last refresh.
	MetricPending = "choreo.order.pending"
	// MetricShedPending counts POST /orders answered 503 because the pending count was at
	// or above the limit.
	MetricShedPending = "choreo.order.shed_by_pending"
)

// WithMaxPending turns on saga-level admission: Create refuses a new order (ErrOverloaded,
// HTTP 503 overloaded with Retry-After) while at least max orders are in flight in the
// saga (PENDING or CANCELLING, counted across every instance sharing the database).
// The count is refreshed by RunPendingCounter (or RefreshPending), never per request;
// between two refreshes each order this instance creates is added to it and each one it
// moves to a terminal state is taken off. A replay of
// an existing Idempotency-Key is never refused. 0 (the default of New) is off; a
// negative max makes New fail.
func WithMaxPending(max int) Option { return func(s *Service) { s.maxPending = int64(max) } }

// MaxPending returns the saga-level admission limit (0: off).
func (s *Service) MaxPending() int { return int(s.maxPending) }

// Pending returns the orders in flight in the saga as of the last refresh, plus those
// this instance created since, less those it ended since.
func (s *Service) Pending() int64 { return s.pending.Load() }

// ShedByPending returns how many creations the pending limit refused.
func (s *Service) ShedByPending() int64 { return s.shedPending.Load() }

func (s *Service) initPendingMetrics(m metric.Meter) error {
	var err error
	if s.shedCount, err = m.Int64Counter(MetricShedPending, metric.WithUnit("{request}"),
		metric.WithDescription("Order creations refused with 503 because the orders in flight in the saga reached ORDER_MAX_PENDING.")); err != nil {
		return fmt.Errorf("ordersvc: metrics: %w", err)
	}
	if _, err = m.Int64ObservableGauge(MetricPending, metric.WithUnit("{order}"),
		metric.WithDescription("Orders in flight in the saga (PENDING and CANCELLING), as of the last refresh."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(s.pending.Load())
			return nil
		})); err != nil {
		return fmt.Errorf("ordersvc: metrics: %w", err)
	}
	return nil
}

// countPendingSQL repeats the predicate of the partial index orders_open_since_idx, so
// it reads only that (small) index and the rows it points to, not the orders table.
const countPendingSQL = `SELECT count(*) FROM orders WHERE state IN ('PENDING', 'CANCELLING')`

// RefreshPending reads the number of orders in flight in the saga (one count over a
// partial index) into Pending.
func (s *Service) RefreshPending(ctx context.Context) error {
	var n int64
	if err := s.db.QueryRow(ctx, countPendingSQL).Scan(&n); err != nil {
		return fmt.Errorf("ordersvc: count pending orders: %w", err)
	}
	s.pending.Store(n)
	return nil
}

// RunPendingCounter refreshes Pending every PendingRefreshInterval, or less often when
// the count itself is slow ([batchjob.Paced]), until ctx is cancelled, then returns nil;
// it returns at once if the limit is off. Between refreshes the instance adds the orders
// it creates and takes off those it ends. Errors are logged (at most one line per ten
// seconds) and the last count is kept.
func (s *Service) RunPendingCounter(ctx context.Context) error {
	if s.maxPending == 0 {
		return nil
	}
	var lastErrLog time.Time
	batchjob.Repeat(ctx, PendingRefreshInterval, func(ctx context.Context) {
		if err := s.RefreshPending(ctx); err != nil && ctx.Err() == nil && time.Since(lastErrLog) >= pendingLogInterval {
			lastErrLog = time.Now()
			s.log.ErrorContext(ctx, "order: pending count failed", "err", err)
		}
	})
	return nil
}

// atLimit reports whether the pending limit is reached (without counting a refusal).
func (s *Service) atLimit() bool {
	return s.maxPending != 0 && s.pending.Load() >= s.maxPending
}

// admitNew reports whether a new order may be created; if not it counts and logs the
// refusal and returns ErrOverloaded.
func (s *Service) admitNew(ctx context.Context) error {
	if !s.atLimit() {
		return nil
	}
	n := s.pending.Load()
	total := s.shedPending.Add(1)
	s.shedCount.Add(ctx, 1)
	if due(&s.lastShedLog, pendingLogInterval) {
		s.log.WarnContext(ctx, "order: shedding load: too many orders in flight in the saga",
			"pending", n, "max_pending", s.maxPending, "shed_total", total)
	}
	return fmt.Errorf("%w: %d orders in flight in the saga (limit %d)", ErrOverloaded, n, s.maxPending)
}

// due reports whether at least every has passed since the time in last (Unix
// nanoseconds) and, if so, sets last to now; of concurrent callers at most one gets true.
// It rate-limits warnings.
func due(last *atomic.Int64, every time.Duration) bool {
	now := time.Now().UnixNano()
	prev := last.Load()
	return now-prev >= int64(every) && last.CompareAndSwap(prev, now)
}
