package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/choreo-saga/choreo/lock"
)

// Locker acquires per-entity leases; *lock.Locker satisfies it. Batch mode
// (StandardBatch) acquires a batch's leases with AcquireAll, all or none. Leases acquired
// by Lock are released in the background: call the Locker's Wait before the process
// exits (app.App does).
type Locker interface {
	Acquire(ctx context.Context, entity string) (*lock.Lease, error)
	AcquireAll(ctx context.Context, entities []string) ([]*lock.Lease, error)
}

type lockConfig struct {
	entity func(m *Message) string
	ahead  bool
}

// LockOption configures Lock.
type LockOption func(*lockConfig)

// LockEntity chooses the entity to lock for a message (default Message.Subject: the
// event's subject, i.e. the record key). Returning "" skips locking for that message.
func LockEntity(f func(m *Message) string) LockOption {
	return func(c *lockConfig) {
		if f != nil {
			c.entity = f
		}
	}
}

// AcquireAhead makes Lock call the next handler while the lease is still being acquired,
// so that the acquisition's round trip to Redis overlaps the next handler's first step
// (for Idempotent, opening the transaction). The next handler must call
// Message.AwaitLease before it does anything that needs the lock; Idempotent does so right
// after BEGIN, before the fence check and the idempotency claim. Standard uses it.
func AcquireAhead() LockOption {
	return func(c *lockConfig) { c.ahead = true }
}

// Lock serialises the handling of one entity across partitions, topics and instances
// with a Redis lease (package lock): it acquires the entity's lease, runs the handlers it
// wraps with the lease's context (cancelled if the lease is lost) and m.Lease set, and
// releases the lease in the background (lock.Lease.ReleaseInBackground: the record does
// not wait for that round trip; the Locker's next Acquire of the entity does, and
// lock.Locker.Wait before exiting lets the last releases reach Redis). A lease that cannot be obtained fails with lock.ErrNotObtained and
// a lease lost mid-handling with lock.ErrLost; both are retryable. The lock is for
// contention, not correctness: the transaction (Idempotent, with Fence) is the guard.
func Lock(l Locker, opts ...LockOption) Middleware {
	cfg := lockConfig{entity: (*Message).Subject}
	for _, o := range opts {
		o(&cfg)
	}
	return locked(l, cfg)
}

// locked is Lock with its options applied.
func locked(l Locker, cfg lockConfig) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			entity := cfg.entity(m)
			if entity == "" {
				return next(ctx, m)
			}
			// The handlers' context ends with ctx or when the lease is lost, and keeps
			// ctx's values (span, correlation id, the worker's stop signal).
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var (
				ls  *leases
				err error
			)
			defer func() { // runs after the acquisition ended, whatever happened
				if ls != nil {
					m.Lease = nil
					ls.release(ctx, true)
				}
			}()
			acquire := func() {
				if ls, err = acquireLeases(ctx, l, []string{entity}, cancel); err == nil {
					m.Lease = ls.held[0]
				}
			}
			if !cfg.ahead {
				if acquire(); err != nil {
					return err
				}
				return ls.lost(ctx, next(lctx, m))
			}
			ready := make(chan struct{})
			m.leaseReady = ready
			go func() {
				defer close(ready)
				acquire()
				m.leaseErr = err
			}()
			defer func() { <-ready; m.leaseReady, m.leaseErr = nil, nil }()
			nerr := next(lctx, m)
			<-ready
			if err != nil {
				return err
			}
			return ls.lost(ctx, nerr)
		}
	}
}

// leases are the leases one handling holds: one per distinct entity of its records (one
// record under Lock, a whole batch in StandardBatch, where an entity may repeat).
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
		m.Lease = byEntity[entities[i]]
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

// release gives the leases back: in the background (lock.Lease.ReleaseInBackground),
// or together in one round trip (lock.ReleaseAll), waiting at most releaseTimeout.
func (ls *leases) release(ctx context.Context, background bool) {
	for _, stop := range ls.stops {
		stop()
	}
	if background {
		for _, lease := range ls.held {
			lease.ReleaseInBackground()
		}
		return
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
