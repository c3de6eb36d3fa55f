package ordersvc

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/choreo-saga/choreo/services/internal/batchjob"
)

// Metric names.
const (
	// MetricStuck is a gauge of stuck orders by state, as of the last sweep.
	MetricStuck = "choreo.order.stuck"
	// MetricTransitions counts state changes by from and to state.
	MetricTransitions = "choreo.order.transitions"
	// MetricIgnored counts events that were invalid in the order's state, by state and
	// trigger.
	MetricIgnored = "choreo.order.ignored_events"
	// MetricDeadlines counts orders moved by their deadline, by the state they left.
	MetricDeadlines = "choreo.order.deadlines_expired"
	// MetricCompensationResends counts re-sent cancellations, by trigger
	// (deadline.compensation, command.retry_compensation).
	MetricCompensationResends = "choreo.order.compensation_resends"
	// MetricMismatched counts payment.authorized and stock.reserved events that did not
	// match their order (ErrMismatch), by event type.
	MetricMismatched = "choreo.order.mismatched_events"
)

func (s *Service) initMetrics() error {
	m := s.mp.Meter(instrumentationName)
	var errs [6]error
	s.transitions, errs[0] = m.Int64Counter(MetricTransitions, metric.WithUnit("{transition}"),
		metric.WithDescription("Order state changes, by from and to state."))
	s.ignored, errs[1] = m.Int64Counter(MetricIgnored, metric.WithUnit("{event}"),
		metric.WithDescription("Events that were invalid in the order's state and were recorded as ignored."))
	s.expired, errs[2] = m.Int64Counter(MetricDeadlines, metric.WithUnit("{order}"),
		metric.WithDescription("Orders moved by their saga or compensation deadline, by the state they left."))
	s.resends, errs[4] = m.Int64Counter(MetricCompensationResends, metric.WithUnit("{event}"),
		metric.WithDescription("Re-sent order.cancel_requested events, by trigger (compensation deadline or by hand)."))
	s.mismatched, errs[5] = m.Int64Counter(MetricMismatched, metric.WithUnit("{event}"),
		metric.WithDescription("payment.authorized and stock.reserved events that did not match their order, by event type."))
	_, errs[3] = m.Int64ObservableGauge(MetricStuck, metric.WithUnit("{order}"),
		metric.WithDescription("Non-terminal orders past their state's stuck threshold, as of the last sweep."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			for st, n := range s.stuck {
				o.Observe(n, metric.WithAttributes(attribute.String("state", string(st))))
			}
			return nil
		}))
	if err := errors.Join(errs[:]...); err != nil {
		return fmt.Errorf("ordersvc: metrics: %w", err)
	}
	return s.initPendingMetrics(m)
}

// Stuck returns the stuck counts of the last sweep (nil before the first).
func (s *Service) Stuck() map[State]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stuck == nil {
		return nil
	}
	out := make(map[State]int64, len(s.stuck))
	for k, v := range s.stuck {
		out[k] = v
	}
	return out
}

// RunSweeper sweeps expired deadlines (SweepOnce) and refreshes the stuck gauge
// (CountStuck) every SweepInterval, or less often when a round is slow
// ([batchjob.Paced]), until ctx is cancelled; it then returns nil. Errors are logged and
// retried at the next round. Every instance may run it.
func (s *Service) RunSweeper(ctx context.Context) error {
	batchjob.Repeat(ctx, s.cfg.SweepInterval, func(ctx context.Context) {
		if err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.ErrorContext(ctx, "order: sweep failed", "err", err)
		}
	})
	return nil
}

// Sweep is one round of RunSweeper: it moves every order past its deadline (SweepOnce,
// batch after batch) and then refreshes the stuck counts behind MetricStuck and Stuck.
func (s *Service) Sweep(ctx context.Context) error {
	var errs []error
	for {
		n, err := s.SweepOnce(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		if err != nil || n < s.cfg.SweepBatch {
			break
		}
	}
	counts, err := s.CountStuck(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	s.mu.Lock()
	s.stuck = counts
	s.mu.Unlock()
	return errors.Join(errs...)
}
