package lock

import (
	"context"
	"fmt"
	"time"
)

// The watchdog of a lease is two timers, not a goroutine: refresh extends the lock to a
// full TTL every refresh period, expiry marks the lease lost (cancelling its context with
// ErrLost) when no refresh succeeded within the TTL.

// newLease returns the lease of a lock just obtained with value and token, its context
// derived from parent, and starts its watchdog.
func (l *Locker) newLease(parent context.Context, entity, key, value string, token int64, start time.Time) *Lease {
	ls := &Lease{
		locker:      l,
		entity:      entity,
		key:         key,
		value:       value,
		token:       token,
		validUntil:  start.Add(l.cfg.ttl),
		releaseDone: make(chan struct{}),
	}
	ls.ctx, ls.cancel = context.WithCancelCause(parent)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.expiry = time.AfterFunc(time.Until(ls.validUntil), ls.expire)
	if l.cfg.watchdog {
		ls.refresh = time.AfterFunc(l.cfg.refreshEvery, ls.extend)
	}
	return ls
}

// expire runs when validUntil passes without a successful refresh.
func (ls *Lease) expire() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.released || ls.lost != nil {
		return
	}
	if d := time.Until(ls.validUntil); d > 0 {
		// A refresh extended the lease while this callback was starting.
		ls.expiry.Reset(d)
		return
	}
	if ls.refresh == nil {
		ls.markLost(fmt.Errorf("%w: %q expired after TTL %v (no watchdog)", ErrLost, ls.entity, ls.locker.cfg.ttl))
		return
	}
	ls.refresh.Stop()
	ls.markLost(fmt.Errorf("%w: %q not refreshed within TTL %v", ErrLost, ls.entity, ls.locker.cfg.ttl))
}

// extend is the refresh timer's callback: it extends the lock to a full TTL and re-arms
// itself, or marks the lease lost when the lock is gone. Transient Redis errors are
// retried sooner; the expiry timer decides when to give up. The refresh runs under the
// lease's context and stops once that context has ended (the lease is being released, or
// its lock expires after TTL).
func (ls *Lease) extend() {
	l := ls.locker
	ls.mu.Lock()
	if ls.released || ls.lost != nil || ls.ctx.Err() != nil {
		ls.mu.Unlock()
		return
	}
	ls.inflight.Add(1)
	deadline := ls.validUntil
	ls.mu.Unlock()
	defer ls.inflight.Done()

	start := time.Now()
	rctx, cancel := context.WithDeadline(ls.ctx, deadline)
	n, err := l.refreshCall(ls.key, ls.value).run(rctx, l.redis).Int64()
	cancel()

	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch {
	case ls.released || ls.lost != nil:
	case err == nil && n == 1:
		ls.validUntil = start.Add(l.cfg.ttl)
		ls.expiry.Reset(time.Until(ls.validUntil))
		ls.refresh.Reset(l.cfg.refreshEvery)
	case err == nil:
		ls.expiry.Stop()
		ls.markLost(fmt.Errorf("%w: %q is no longer held by this lease", ErrLost, ls.entity))
	case ls.ctx.Err() != nil:
		// The lease's context ended during the refresh: stop refreshing, as above.
	default:
		ls.refresh.Reset(max(l.cfg.refreshEvery/4, time.Millisecond))
	}
}
