package lock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// releaseDelay bounds how long a background release waits for an Acquire (or AcquireAll)
// of the same Locker to carry it to Redis in its own pipeline; after that it is sent on
// its own. See "Releases ride on the next acquisition" in the package doc.
const releaseDelay = time.Millisecond

// queueRelease queues the claimed release of h (beginRelease returned true) to be sent
// with the Locker's next acquisition, or on its own after releaseDelay. Only for a client
// that can pipeline.
func (l *Locker) queueRelease(h *holding) {
	done := make(chan struct{})
	l.mu.Lock()
	h.bgPrev = l.releasing[h.key] // another lease of the key still releasing (expired leases)
	h.bgDone = done
	h.queuedAt = time.Now()
	l.releasing[h.key] = done
	l.pending = append(l.pending, h)
	l.background.Add(1)
	if !l.timerArmed {
		l.timerArmed = true
		if l.flushTimer == nil {
			l.flushTimer = time.AfterFunc(l.releaseDelay, l.flushDue)
		} else {
			l.flushTimer.Reset(l.releaseDelay)
		}
	}
	l.mu.Unlock()
}

// takePending removes and returns every queued release; the caller must send them
// (carried by its pipeline or with sendReleases) and then call finishReleases.
func (l *Locker) takePending() []*holding {
	l.mu.Lock()
	defer l.mu.Unlock()
	carry := l.pending
	l.pending = nil
	if carry != nil && l.timerArmed {
		l.flushTimer.Stop() // if it already fired, flushDue finds nothing (or later entries) to do
		l.timerArmed = false
	}
	return carry
}

// flushDue is the timer's callback: it sends, in one round trip, the queued releases
// that waited releaseDelay, and re-arms the timer for the rest.
func (l *Locker) flushDue() {
	now := time.Now()
	l.mu.Lock()
	n := 0
	for n < len(l.pending) && now.Sub(l.pending[n].queuedAt) >= l.releaseDelay {
		n++
	}
	due := make([]*holding, n)
	copy(due, l.pending)
	l.pending = append(l.pending[:0:0], l.pending[n:]...)
	if len(l.pending) > 0 {
		l.timerArmed = true
		l.flushTimer.Reset(l.pending[0].queuedAt.Add(l.releaseDelay).Sub(now))
	} else {
		l.timerArmed = false
		l.pending = nil
	}
	l.mu.Unlock()
	l.sendReleases(due)
}

// sendReleases sends the released holdings' scripts in one round trip, bounded by TTL (an
// unreleased lock expires by then anyway), and finishes them.
func (l *Locker) sendReleases(holdings []*holding) {
	if len(holdings) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.ttl)
	defer cancel()
	calls := make([]scriptCall, len(holdings))
	for i, h := range holdings {
		calls[i] = h.releaseCall()
	}
	l.finishReleases(holdings, runAll(ctx, l.redis, calls))
}

// releaseCall is the run of the release script for h.
func (h *holding) releaseCall() scriptCall {
	return releaseCall(h.key, h.value)
}

// finishReleases ends the queued releases of holdings with the replies cmds[i] of
// their release scripts: their results are set, their users' contexts cancelled, and
// Acquire and Wait stop waiting for them. A Redis error is dropped, as for any background release: the lock
// then expires after TTL.
func (l *Locker) finishReleases(holdings []*holding, cmds []*redis.Cmd) {
	for i, h := range holdings {
		n, err := cmds[i].Int64()
		h.endRelease(n, err)
		l.mu.Lock()
		if l.releasing[h.key] == h.bgDone {
			delete(l.releasing, h.key)
		}
		l.mu.Unlock()
		if prev := h.bgPrev; prev != nil {
			// Keep awaitOthers' promise (every release of the key has ended) for the
			// rare older release of an expired lease of the key still in flight.
			go func(done chan struct{}) {
				<-prev
				close(done)
				l.background.Done()
			}(h.bgDone)
			continue
		}
		close(h.bgDone)
		l.background.Done()
	}
}

// carriedBy reports whether done is the release of one of carry.
func carriedBy(carry []*holding, done chan struct{}) bool {
	for _, h := range carry {
		if h.bgDone == done {
			return true
		}
	}
	return false
}

// awaitOthers waits until no background release of key is in flight, except those in
// *carry (the caller sends them); false if ctx ended first. Before it waits, it hands
// *carry to a goroutine of its own (and clears it): an acquisition never waits while
// holding releases that another one may be waiting for.
func (l *Locker) awaitOthers(ctx context.Context, key string, carry *[]*holding) bool {
	l.mu.Lock()
	done := l.releasing[key]
	l.mu.Unlock()
	if done == nil || carriedBy(*carry, done) {
		return true
	}
	if *carry != nil {
		go l.sendReleases(*carry)
		*carry = nil
	}
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// obtainCarrying runs, in one pipeline and in this order, the release scripts of carry
// (queued releases taken with takePending) and the obtain script for each of obtains, and
// returns the obtains' replies. A release of the same entity thus reaches Redis before its
// obtain, so a worker's next record of the entity finds the lock free. The pipeline is
// not cancelled with ctx, only bounded by its deadline: the releases it carries must reach
// Redis even when the caller stops meanwhile.
func (l *Locker) obtainCarrying(ctx context.Context, carry []*holding, obtains []scriptCall) []*redis.Cmd {
	calls := make([]scriptCall, len(carry), len(carry)+len(obtains))
	for i, h := range carry {
		calls[i] = h.releaseCall()
	}
	calls = append(calls, obtains...)
	pctx := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		pctx, cancel = context.WithDeadline(pctx, d)
		defer cancel()
	}
	cmds := runAll(pctx, l.redis, calls)
	l.finishReleases(carry, cmds)
	return cmds[len(carry):]
}

// takeForAcquire takes the queued releases for an acquisition under ctx: none when the
// client cannot pipeline, and when ctx has already ended they are sent on their own at once.
func (l *Locker) takeForAcquire(ctx context.Context) []*holding {
	if !l.pipelines {
		return nil
	}
	carry := l.takePending()
	if carry != nil && ctx.Err() != nil {
		go l.sendReleases(carry)
		return nil
	}
	return carry
}
