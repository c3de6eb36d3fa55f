package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/tracing"
)

// StandardBatch returns the batch-mode counterpart of Standard, for WithBatch: it handles
// several records of one partition in ONE transaction, so that one commit (and its disk
// flush) is shared by the whole batch, which is what lets a consumer go beyond the
// database's transactions-per-second limit.
//
// For a batch it decodes every record and applies the router's filter (ignored types are
// settled, unknown types fail the batch), acquires the leases of every distinct entity
// together (lock.Locker.AcquireAll: one round trip, all or none), then in one transaction
// checks each lease's fence once (if Fence), claims every event's idempotency key in one
// statement (idempotency.Store.ClaimAll, which inserts in key order so that concurrent
// transactions on the same keys cannot deadlock), and calls the business handler, in
// offset order, for every event that is not a duplicate (copies of one event within the
// batch included); then it commits, runs the AfterCommit hooks once, and releases the
// leases together. Each record still gets its own consumer span (child of its producer's
// span), correlation context, metric and log line; the batch's own statements are traced
// under its first record's span. A batch whose records are all ignored opens no
// transaction.
//
// Any failure (a record that does not decode, an unknown type, a lease not obtained, a
// handler error or panic, a failed commit) rolls the whole batch back and returns the
// error: the runtime then hands the same records to the Standard chain one at a time,
// where they are retried and dead-lettered individually. cfg is the Standard config of
// that chain; use the same value for both.
func StandardBatch(cfg StandardConfig) (BatchHandler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	ins, err := newInstruments(mp)
	if err != nil {
		return nil, err
	}
	k := tracing.NewKafka(cfg.tracingOptions()...)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	entityAttr := cfg.EntityAttribute
	if entityAttr == "" {
		entityAttr = "entity.id"
	}
	lockEntity := cfg.LockEntity
	if lockEntity == nil {
		lockEntity = (*Message).Subject
	}
	store := cfg.Store
	if store == nil {
		store = idempotency.NewStore()
	}
	name := cfg.Name
	if name == "" {
		name = "handler"
	}
	h := cfg.Handler
	if cfg.Router != nil {
		h = cfg.Router.Route
	}

	pool := newPoolCheck(cfg.DB) // warns when the pool is smaller than the assignment
	return func(ctx context.Context, ms []*Message) (err error) {
		pool.check(ctx)
		start := time.Now()
		defer func() {
			if v := recover(); v != nil {
				err = &PanicError{Value: v, Stack: debug.Stack()}
			}
			if err != nil {
				for _, m := range ms {
					m.Outcome, m.Lease = "", nil
				}
			}
		}()

		// Decode and filter; workAt[j] is the index in ms of work[j].
		work := make([]*Message, 0, len(ms))
		workAt := make([]int, 0, len(ms))
		for i, m := range ms {
			if !m.Decoded {
				ev, err := event.FromRecord(m.Record, cfg.Decode...)
				if err != nil {
					return fmt.Errorf("consumer: batch: decode offset %d: %w", m.Record.Offset, err)
				}
				m.Event, m.Decoded = ev, true
			}
			if r := cfg.Router; r != nil {
				switch {
				case r.ignore[m.Event.Type]:
					m.Outcome = OutcomeIgnored
					continue
				case r.routes[m.Event.Type] == nil:
					return fmt.Errorf("%w: %q", ErrUnknownType, m.Event.Type)
				}
			}
			work = append(work, m)
			workAt = append(workAt, i)
		}

		// Lock every entity of the batch, all or none (so that batches of different
		// partitions that share entities cannot deadlock); leases come sorted by entity.
		lctx := ctx
		var leases []*lock.Lease
		if cfg.Locker != nil && len(work) > 0 {
			var release func()
			var err error
			leases, release, err = acquireAll(ctx, cfg.Locker, work, lockEntity)
			if err != nil {
				return err
			}
			defer release()
			var cancel context.CancelFunc
			lctx, cancel = context.WithCancel(ctx)
			defer cancel()
			for _, l := range leases {
				stop := context.AfterFunc(l.Context(), cancel)
				defer stop()
			}
		}

		// One span and correlation context per record.
		ctxs := make([]context.Context, len(ms))
		spans := make([]trace.Span, len(ms))
		for i, m := range ms {
			ctxs[i], spans[i] = k.StartProcess(lctx, m.Record, m.Group)
			ctxs[i] = withCorrelation(ctxs[i], m, entityAttr)
		}
		defer func() {
			for i, s := range spans {
				s.SetAttributes(outcomeKey.String(string(ms[i].outcome(err))), eventTypeKey.String(ms[i].Event.Type))
				if err != nil {
					s.RecordError(err)
					s.SetStatus(codes.Error, err.Error())
				}
				s.End()
			}
		}()

		if len(work) > 0 {
			// The batch's own statements (BEGIN, fences, the claims, COMMIT) are traced
			// under its first record's span.
			first := ctxs[workAt[0]]
			err = pgx.BeginFunc(first, cfg.DB, func(tx pgx.Tx) error {
				// Fences first, once per lease, in entity order.
				if cfg.Fence {
					for _, l := range leases {
						if err := l.CheckFence(first, tx); err != nil {
							return err
						}
					}
				}
				// Every claim in one statement; ClaimAll inserts in key order, so that
				// transactions racing on the same keys wait for each other instead of
				// deadlocking.
				reqs := make([]idempotency.Request, len(work))
				for i, m := range work {
					reqs[i] = idempotency.Request{Key: m.Event.ID, Hash: idempotency.Hash([]byte(m.Event.Type), m.Event.Data)}
				}
				claims, err := store.ClaimAll(first, tx, work[0].Group+"/"+name, reqs)
				if err != nil {
					return err
				}
				// Handlers in offset order.
				for i, m := range work {
					if claims[i].Duplicate {
						m.Outcome = OutcomeDuplicate
						continue
					}
					if err := h(ctxs[workAt[i]], tx, m.Event); err != nil {
						return fmt.Errorf("consumer: batch: handle %s %s: %w", m.Event.Type, m.Event.ID, err)
					}
				}
				return nil
			})
		}
		if err != nil {
			if lost := firstLost(work); lost != nil && ctx.Err() == nil {
				err = fmt.Errorf("%w: %w", lost, err)
			}
			return err
		}
		if len(work) > 0 {
			for _, f := range cfg.AfterCommit {
				f()
			}
		}
		elapsed := time.Since(start)
		ins.recordBatch(ctx, ms)
		for i, m := range ms {
			ins.record(ctxs[i], m, nil, elapsed)
			logRecord(ctxs[i], logger, m, nil, elapsed)
			m.Lease = nil
		}
		return nil
	}, nil
}

// acquireAll acquires the leases of every distinct entity of ms together (all or none)
// and sets each message's Lease; the returned function releases them together.
func acquireAll(ctx context.Context, l Locker, ms []*Message, entityOf func(*Message) string) ([]*lock.Lease, func(), error) {
	entities := make([]string, len(ms))
	for i, m := range ms {
		entities[i] = entityOf(m)
	}
	leases, err := l.AcquireAll(ctx, entities)
	if err != nil {
		return nil, nil, fmt.Errorf("consumer: batch: lock: %w", err)
	}
	byEntity := make(map[string]*lock.Lease, len(leases))
	for _, ls := range leases {
		byEntity[ls.Entity()] = ls
	}
	for i, m := range ms {
		m.Lease = byEntity[entities[i]]
	}
	release := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = lock.ReleaseAll(rctx, leases) // an expired lease frees itself
	}
	return leases, release, nil
}

func firstLost(ms []*Message) error {
	for _, m := range ms {
		if m.Lease != nil && m.Lease.Err() != nil && errors.Is(m.Lease.Err(), lock.ErrLost) {
			return lock.ErrLost
		}
	}
	return nil
}
