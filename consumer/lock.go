package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/choreo-saga/choreo/lock"
)

// Locker acquires per-entity leases; *lock.Locker satisfies it. Batch mode
// (StandardBatch) acquires a batch's leases with AcquireAll, all or none.
type Locker interface {
	Acquire(ctx context.Context, entity string) (*lock.Lease, error)
	AcquireAll(ctx context.Context, entities []string) ([]*lock.Lease, error)
}

type lockConfig struct {
	entity         func(m *Message) string
	releaseTimeout time.Duration
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

// Lock serialises the handling of one entity across partitions, topics and instances
// with a Redis lease (package lock): it acquires the entity's lease, runs the handlers it
// wraps with the lease's context (cancelled if the lease is lost) and m.Lease set, and
// releases the lease. A lease that cannot be obtained fails with lock.ErrNotObtained and
// a lease lost mid-handling with lock.ErrLost; both are retryable. The lock is for
// contention, not correctness: the transaction (Idempotent, with Fence) is the guard.
func Lock(l Locker, opts ...LockOption) Middleware {
	cfg := lockConfig{entity: (*Message).Subject, releaseTimeout: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			entity := cfg.entity(m)
			if entity == "" {
				return next(ctx, m)
			}
			lease, err := l.Acquire(ctx, entity)
			if err != nil {
				return fmt.Errorf("consumer: lock %q: %w", entity, err)
			}
			m.Lease = lease
			defer func() {
				m.Lease = nil
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.releaseTimeout)
				defer cancel()
				_ = lease.Release(rctx) // an expired lease frees itself
			}()
			// The handlers' context ends with ctx or when the lease is lost, and keeps
			// ctx's values (span, correlation id, the worker's stop signal).
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			stop := context.AfterFunc(lease.Context(), cancel)
			defer stop()
			err = next(lctx, m)
			if err != nil && lease.Context().Err() != nil && ctx.Err() == nil {
				return fmt.Errorf("consumer: lock %q: %w: %w", entity, lock.ErrLost, err)
			}
			return err
		}
	}
}
