package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/choreo-saga/choreo/lock"
)

// Locker acquires per-entity leases; *lock.Locker satisfies it. Its leases are package
// lock's, because the fence check (StandardConfig.Fence) compares their tokens with the
// ones lock records in Postgres: the interface exists to wrap a *lock.Locker (to count
// or trace acquisitions), not to replace package lock. Batch mode
// (StandardBatch) acquires a batch's leases with AcquireAll, all or none. Leases acquired
// by Lock are released in the background: call the Locker's Wait before the process
// exits (app.App does).
type Locker interface {
	Acquire(ctx context.Context, entity string) (*lock.Lease, error)
	AcquireAll(ctx context.Context, entities []string) ([]*lock.Lease, error)
}

// holdLock serialises the handling of one entity across partitions, topics and instances
// with a Redis lease (package lock): it acquires the entity's lease, runs the handlers it
// wraps with the lease's context (cancelled if the lease is lost) and the lease attached
// to the message (Idempotent checks its fencing token), and releases the lease in the
// background (lock.Lease.ReleaseInBackground: the record does not wait for a round trip,
// and lock.Locker.Wait before exiting lets the last releases reach Redis). A lease that
// cannot be obtained fails with lock.ErrNotObtained and a lease lost mid-handling with
// lock.ErrLost; both are retryable. The lock is for contention, not
// correctness: the transaction (Idempotent, with Fence) is the guard.
//
// entity chooses the entity to lock for a message; nil means Message.Subject (the event's
// subject, i.e. the record key). Returning "" skips locking for that message; an error
// fails the handling (Retry and DeadLetter classify it as any handler error).
//
// The lease is acquired on the goroutine that handles the message, before the inner
// handlers run and before the transaction opens: entity runs outside any transaction,
// with the record's context. No goroutine per record, and nothing else ever touches the
// message.
func holdLock(l Locker, entity func(ctx context.Context, m *Message) (string, error)) Middleware {
	if entity == nil {
		entity = subjectEntity
	}
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			entity, err := entity(ctx, m)
			if err != nil {
				return fmt.Errorf("consumer: the entity to lock: %w", err)
			}
			if entity == "" {
				return next(ctx, m)
			}
			lease, err := l.Acquire(ctx, entity)
			if err != nil {
				return fmt.Errorf("consumer: lock %q: %w", entity, err)
			}
			m.lease = lease
			defer func() { // also when a handler panics (Recover sits outside Lock)
				m.lease = nil
				lease.ReleaseInBackground()
			}()
			// The lease's context ends with ctx or when the lease is lost, and keeps
			// ctx's values (span, correlation id, the worker's stop signal).
			err = next(lease.Context(), m)
			if err != nil && ctx.Err() == nil && lease.Err() != nil {
				err = fmt.Errorf("consumer: lock %q: %w: %w", entity, lock.ErrLost, err)
			}
			return err
		}
	}
}

// subjectEntity is the default entity to lock: the message's subject (its record key).
func subjectEntity(_ context.Context, m *Message) (string, error) { return m.Subject(), nil }

// leases are the leases a batch holds: one per distinct entity of its records (an entity
// may repeat within a batch).
type leases struct {
	held  []*lock.Lease // sorted by entity
	stops []func() bool // stop cancelling the handlers' context when a lease is lost
	one   [1]*lock.Lease
	stop1 [1]func() bool
}

// acquireLeases obtains the leases of the distinct non-empty entities: with Acquire for
// one entity, with AcquireAll (one round trip, all or none, so that batches sharing
// entities cannot deadlock) for several. lost is called when any of them is lost. Lock
// and StandardBatch both call it.
func acquireLeases(ctx context.Context, l Locker, entities []string, lost context.CancelFunc) (*leases, error) {
	ls := new(leases)
	if len(entities) == 1 {
		if entities[0] == "" {
			return ls, nil
		}
		lease, err := l.Acquire(ctx, entities[0])
		if err != nil {
			return nil, fmt.Errorf("consumer: lock %q: %w", entities[0], err)
		}
		ls.one[0] = lease
		ls.held = ls.one[:]
	} else {
		held, err := l.AcquireAll(ctx, entities)
		if err != nil {
			return nil, fmt.Errorf("consumer: lock %d entities: %w", len(entities), err)
		}
		ls.held = held
	}
	ls.stops = ls.stop1[:0]
	for _, lease := range ls.held {
		ls.stops = append(ls.stops, context.AfterFunc(lease.Context(), lost))
	}
	return ls, nil
}

// assign sets each message's Lease to the lease of its entity (entities[i] is ms[i]'s).
func (ls *leases) assign(ms []*Message, entities []string) {
	byEntity := make(map[string]*lock.Lease, len(ls.held))
	for _, lease := range ls.held {
		byEntity[lease.Entity()] = lease
	}
	for i, m := range ms {
		m.lease = byEntity[entities[i]]
	}
}

// lost adds lock.ErrLost to a handling's error when one of the leases was lost meanwhile
// (and not because ctx ended).
func (ls *leases) lost(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	for _, lease := range ls.held {
		if lease.Context().Err() != nil {
			return fmt.Errorf("consumer: lock %q: %w: %w", lease.Entity(), lock.ErrLost, err)
		}
	}
	return err
}

// release gives the leases back together in one round trip (lock.ReleaseAll), waiting
// at most releaseTimeout.
func (ls *leases) release(ctx context.Context) {
	for _, stop := range ls.stops {
		stop()
	}
	if len(ls.held) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	_ = lock.ReleaseAll(rctx, ls.held) // an expired lease frees itself
}

// releaseTimeout bounds a synchronous release of a batch's leases.
const releaseTimeout = 5 * time.Second
