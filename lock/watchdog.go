package lock

import (
	"context"
	"fmt"
	"time"
)

// The watchdog of a lease is two timers, not a goroutine: refresh extends the lock to a
// full TTL every refresh period, expiry cancels the lease's context with ErrLost when no
// refresh succeeded within the TTL.

func (l *Locker) newLease(parent context.Context, entity, key, value string, token int64, start time.Time) *Lease {
	ctx, cancel := context.WithCancelCause(parent)
	ls := &Lease{
		locker:      l,
		entity:      entity,
		key:         key,
		value:       value,
		token:       token,
		ctx:         ctx,
		cancel:      cancel,
		validUntil:  start.Add(l.cfg.ttl),
		releaseDone: make(chan struct{}),
	}
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
	if ls.released {
		return
	}
	if d := time.Until(ls.validUntil); d > 0 {
		// A refresh extended the lease while this callback was starting.
		ls.expiry.Reset(d)
		return
	}
	if ls.refresh == nil {
		ls.cancel(fmt.Errorf("%w: %q expired after TTL %v (no watchdog)", ErrLost, ls.entity, ls.locker.cfg.ttl))
		return
	}
	ls.refresh.Stop()
	ls.cancel(fmt.Errorf("%w: %q not refreshed within TTL %v", ErrLost, ls.entity, ls.locker.cfg.ttl))
}

// extend is the refresh timer's callback: it extends the lock to a full
// TTL and re-arms itself, or cancels the lease's context with ErrLost when
// the lock is gone. Transient Redis errors are retried sooner; the expiry
// timer decides when to give up.
func (ls *Lease) extend() {
	ls.mu.Lock()
	if ls.released || ls.ctx.Err() != nil {
		ls.mu.Unlock()
		return
	}
	ls.inflight.Add(1)
	deadline := ls.validUntil
	ls.mu.Unlock()
	defer ls.inflight.Done()

	cfg := ls.locker.cfg
	start := time.Now()
	rctx, cancel := context.WithDeadline(ls.ctx, deadline)
	n, err := refreshScript.Run(rctx, ls.locker.redis, []string{ls.key}, ls.value,
		ls.locker.ttlArg).Int64()
	cancel()

	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.released || ls.ctx.Err() != nil {
		return
	}
	switch {
	case err == nil && n == 1:
		ls.validUntil = start.Add(cfg.ttl)
		ls.expiry.Reset(time.Until(ls.validUntil))
		ls.refresh.Reset(cfg.refreshEvery)
	case err == nil:
		ls.expiry.Stop()
		ls.cancel(fmt.Errorf("%w: %q is no longer held by this lease", ErrLost, ls.entity))
	default:
		ls.refresh.Reset(max(cfg.refreshEvery/4, time.Millisecond))
	}
}
