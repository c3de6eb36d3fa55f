package lock

import (
	"context"
	"fmt"
	"time"
)

// The watchdog of a holding is two timers, not a goroutine: refresh extends the lock to a
// full TTL every refresh period, expiry marks the holding lost (cancelling the context of
// the lease using it with ErrLost) when no refresh succeeded within the TTL.

// firstUse is a new holding and its first lease, allocated together.
type firstUse struct {
	lease Lease
	h     holding
}

// newLease returns the first lease of a holding just obtained with value and token, its
// context derived from parent, and starts the holding's watchdog.
func (l *Locker) newLease(parent context.Context, entity, key, value string, token int64, start time.Time) *Lease {
	u := &firstUse{h: holding{
		locker:      l,
		entity:      entity,
		key:         key,
		value:       value,
		token:       token,
		validUntil:  start.Add(l.cfg.ttl),
		releaseDone: make(chan struct{}),
	}}
	h, ls := &u.h, &u.lease
	ls.h = h
	ls.ctx, ls.cancel = context.WithCancelCause(parent)
	h.cur = ls
	h.mu.Lock()
	defer h.mu.Unlock()
	h.expiry = time.AfterFunc(time.Until(h.validUntil), h.expire)
	if l.cfg.watchdog {
		h.refresh = time.AfterFunc(l.cfg.refreshEvery, h.extend)
	}
	return ls
}

// expire runs when validUntil passes without a successful refresh.
func (h *holding) expire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released || h.lost != nil {
		return
	}
	if d := time.Until(h.validUntil); d > 0 {
		// A refresh extended the holding while this callback was starting.
		h.expiry.Reset(d)
		return
	}
	if h.refresh == nil {
		h.markLost(fmt.Errorf("%w: %q expired after TTL %v (no watchdog)", ErrLost, h.entity, h.locker.cfg.ttl))
		return
	}
	h.refresh.Stop()
	h.markLost(fmt.Errorf("%w: %q not refreshed within TTL %v", ErrLost, h.entity, h.locker.cfg.ttl))
}

// extend is the refresh timer's callback: it extends the lock to a full TTL and re-arms
// itself, or marks the holding lost when the lock is gone. Transient Redis errors are
// retried sooner; the expiry timer decides when to give up. While a lease uses the
// holding, the refresh runs under that lease's context, and stops once that context has
// ended (the use is ending: its lock is released, or expires after TTL); a holding kept
// idle (WithKeep) is refreshed under a background context.
func (h *holding) extend() {
	l := h.locker
	h.mu.Lock()
	parent := context.Background()
	if h.cur != nil {
		parent = h.cur.ctx
	}
	if h.released || h.lost != nil || parent.Err() != nil {
		h.mu.Unlock()
		return
	}
	if h.cur == nil && l.pipelines {
		// Kept idle: refreshed together with the other kept holdings due (keep.go).
		h.mu.Unlock()
		l.queueRefresh(h)
		return
	}
	h.inflight.Add(1)
	deadline := h.validUntil
	h.mu.Unlock()
	defer h.inflight.Done()

	start := time.Now()
	rctx, cancel := context.WithDeadline(parent, deadline)
	n, err := l.refreshCall(h.key, h.value).run(rctx, l.redis).Int64()
	cancel()
	h.extended(parent, start, n, err)
}

// extended applies the reply (n, err) of a refresh of h started at start under parent:
// the holding is valid for a TTL from start, or lost, or the refresh is retried sooner.
func (h *holding) extended(parent context.Context, start time.Time, n int64, err error) {
	cfg := h.locker.cfg
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released || h.lost != nil {
		return
	}
	switch {
	case err == nil && n == 1:
		h.validUntil = start.Add(cfg.ttl)
		h.expiry.Reset(time.Until(h.validUntil))
		h.refresh.Reset(cfg.refreshEvery)
	case err == nil:
		h.expiry.Stop()
		h.markLost(fmt.Errorf("%w: %q is no longer held by this lease", ErrLost, h.entity))
	case parent.Err() != nil && h.cur != nil && h.cur.ctx == parent:
		// The lease's context ended during the refresh: stop refreshing, as above.
	default:
		h.refresh.Reset(max(cfg.refreshEvery/4, time.Millisecond))
	}
}
