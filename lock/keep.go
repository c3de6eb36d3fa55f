package lock

import (
	"context"
	"time"
)

// Kept holdings (WithKeep): see "Kept leases" in the package doc. A holding is kept in the
// Locker's kept map (under its mu) by its key; whoever removes it from the map (a reuse,
// the idle timer, AcquireAll, Wait) owns it.

// keep keeps h, whose last lease ended with the holding kept (Lease.end), idle on l for
// the keep duration.
func (l *Locker) keep(h *holding) {
	l.mu.Lock()
	if _, other := l.kept[h.key]; other {
		// Another holding of the entity is kept already: this one's lock expired in
		// Redis before its watchdog could tell and was obtained again. Release it.
		l.mu.Unlock()
		l.releaseKept(h)
		return
	}
	l.kept[h.key] = h
	h.keptAt = time.Now()
	if h.idleTimer == nil {
		h.idleTimer = time.AfterFunc(l.cfg.keep, h.idleEnd)
	} else {
		h.idleTimer.Reset(l.cfg.keep)
	}
	l.mu.Unlock()
}

// idleEnd is a kept holding's idle timer callback: it releases the holding (in the
// background: the release rides on the Locker's next acquisition) when it has been kept
// idle for the keep duration.
func (h *holding) idleEnd() {
	l := h.locker
	l.mu.Lock()
	if l.kept[h.key] != h {
		l.mu.Unlock() // reused (or released) meanwhile
		return
	}
	if d := l.cfg.keep - time.Since(h.keptAt); d > 0 {
		h.idleTimer.Reset(d) // reused and kept again since the timer was set
		l.mu.Unlock()
		return
	}
	delete(l.kept, h.key)
	l.mu.Unlock()
	l.releaseKept(h)
}

// takeKept removes and returns the holding of key kept on l, or nil if none is.
func (l *Locker) takeKept(key string) *holding {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.kept[key]
	if h != nil {
		delete(l.kept, key)
		h.idleTimer.Stop() // if it already fired, idleEnd finds h no longer kept
	}
	return h
}

// releaseKept releases h, a holding taken out of the kept map, in the background.
func (l *Locker) releaseKept(h *holding) {
	if h.beginRelease() {
		l.releaseInBackground(h, context.Background())
	}
}

// reuse returns a new lease, with its context derived from ctx, of the holding of key
// kept on l, or nil if none is kept. A kept holding that is known to be lost or whose
// validity has passed is never handed out: it is released instead (its release then rides
// on the caller's acquisition) and reuse returns nil.
func (l *Locker) reuse(ctx context.Context, key string) *Lease {
	h := l.takeKept(key)
	if h == nil {
		return nil
	}
	h.mu.Lock()
	if h.lost == nil && time.Now().Before(h.validUntil) {
		ls := &Lease{h: h}
		ls.ctx, ls.cancel = context.WithCancelCause(ctx)
		h.cur = ls
		h.mu.Unlock()
		return ls
	}
	h.mu.Unlock()
	l.releaseKept(h)
	return nil
}

// queueRefresh queues the refresh of h, a kept holding whose watchdog is due, to be sent
// with those of the other kept holdings due within refreshBatchDelay, in one round trip.
// Only for a client that can pipeline.
func (l *Locker) queueRefresh(h *holding) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refreshes = append(l.refreshes, h)
	if l.refreshArmed {
		return
	}
	l.refreshArmed = true
	if l.refreshTimer == nil {
		l.refreshTimer = time.AfterFunc(l.refreshBatchDelay, l.refreshKept)
	} else {
		l.refreshTimer.Reset(l.refreshBatchDelay)
	}
}

// refreshKept is the refresh batch timer's callback: it sends the queued refreshes of kept
// holdings in one pipeline, bounded by the refresh period, and applies each reply as the
// holding's own watchdog would. A holding released or lost meanwhile is skipped; one
// reused meanwhile is refreshed all the same.
func (l *Locker) refreshKept() {
	l.mu.Lock()
	queued := l.refreshes
	l.refreshes, l.refreshArmed = nil, false
	l.mu.Unlock()
	live := queued[:0]
	calls := make([]scriptCall, 0, len(queued))
	for _, h := range queued {
		h.mu.Lock()
		if !h.released && h.lost == nil {
			h.inflight.Add(1) // a release waits for the refresh
			live = append(live, h)
			calls = append(calls, l.refreshCall(h.key, h.value))
		}
		h.mu.Unlock()
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.refreshEvery)
	defer cancel()
	start := time.Now()
	for i, cmd := range runAll(ctx, l.redis, calls) {
		n, err := cmd.Int64()
		live[i].extended(ctx, start, n, err)
		live[i].inflight.Done()
	}
}

// releaseAllKept releases every kept holding in the background (Wait).
func (l *Locker) releaseAllKept() {
	l.mu.Lock()
	all := make([]*holding, 0, len(l.kept))
	for key, h := range l.kept {
		delete(l.kept, key)
		h.idleTimer.Stop()
		all = append(all, h)
	}
	l.mu.Unlock()
	for _, h := range all {
		l.releaseKept(h)
	}
}
