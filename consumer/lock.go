package consumer

import (
	"context"
	"fmt"

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
				lease *lock.Lease
				err   error
				stop  func() bool
			)
			defer func() { // runs after the acquisition ended, whatever happened
				if lease == nil {
					return
				}
				stop()
				m.Lease = nil
				lease.ReleaseInBackground()
			}()
			acquire := func() {
				if lease, err = l.Acquire(ctx, entity); err == nil {
					m.Lease = lease
					stop = context.AfterFunc(lease.Context(), cancel)
				}
			}
			if !cfg.ahead {
				if acquire(); err != nil {
					return wrapLockErr(entity, err)
				}
				return checkLost(ctx, entity, lease, next(lctx, m))
			}
			ready := make(chan struct{})
			m.leaseReady = ready
			go func() {
				defer close(ready)
				acquire()
				m.leaseErr = wrapLockErr(entity, err)
			}()
			defer func() { <-ready; m.leaseReady, m.leaseErr = nil, nil }()
			nerr := next(lctx, m)
			<-ready
			if err != nil {
				return m.leaseErr
			}
			return checkLost(ctx, entity, lease, nerr)
		}
	}
}

// checkLost adds lock.ErrLost to a handler's error when the lease was lost meanwhile.
func checkLost(ctx context.Context, entity string, lease *lock.Lease, err error) error {
	if err != nil && lease.Context().Err() != nil && ctx.Err() == nil {
		return fmt.Errorf("consumer: lock %q: %w: %w", entity, lock.ErrLost, err)
	}
	return err
}

func wrapLockErr(entity string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("consumer: lock %q: %w", entity, err)
}
