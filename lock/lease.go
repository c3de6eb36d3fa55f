package lock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Lease is one use of an entity's lock: from the Acquire (or AcquireAll) that returned it
// until its Release, ReleaseInBackground or ReleaseAll. Its methods are safe for
// concurrent use.
//
// The lock itself, as held in Redis, is the lease's holding: its key, random value,
// fencing token and watchdog. Without WithKeep a holding serves exactly one lease. With
// WithKeep, ReleaseInBackground keeps the holding on its Locker for a while, and a later
// Acquire of the entity on that Locker gets a new Lease on the same holding (same token),
// with a Context of its own (see "Kept leases" in the package doc).
type Lease struct {
	h *holding

	// ctx is derived from the Acquire context of this use; it is cancelled with cause
	// ErrLost when the holding is lost during the use, and when the use ends.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// Under h.mu: ended is set by the first call that ends the use (Release,
	// ReleaseInBackground, ReleaseAll); kept when that call kept the holding instead of
	// releasing it.
	ended, kept bool
}

// holding is one possession of an entity's lock in Redis, from the obtain script to the
// release script, served to one Lease at a time.
type holding struct {
	locker *Locker
	entity string
	key    string
	value  string
	token  int64

	// The watchdog is two timers, not a goroutine: refresh (nil without watchdog)
	// extends the lock, expiry marks the holding lost when validUntil passes. Their
	// callbacks, the releases and the fields below synchronise on mu; inflight counts
	// running refreshes.
	mu         sync.Mutex
	validUntil time.Time
	released   bool
	lost       error  // wraps ErrLost once the holding is known to be lost
	cur        *Lease // the lease using the holding; nil while it is kept idle
	refresh    *time.Timer
	expiry     *time.Timer
	inflight   sync.WaitGroup

	// The release that set released runs the release script, sets releaseErr and
	// closes releaseDone; other calls wait for releaseDone and return releaseErr.
	releaseDone chan struct{}
	releaseErr  error

	// A queued background release (pending.go, under the Locker's mu until sent):
	// bgDone is closed when it has ended (after bgPrev, an older release of the key, if
	// any).
	bgDone   chan struct{}
	bgPrev   chan struct{}
	queuedAt time.Time

	// While kept idle (keep.go, under the Locker's mu): since when, and the timer that
	// releases the holding after the keep duration.
	keptAt    time.Time
	idleTimer *time.Timer
}

// Entity returns the entity the lease locks.
func (ls *Lease) Entity() string { return ls.h.entity }

// Key returns the Redis key of the lock; Lease.CheckFence records the
// fencing token under this key.
func (ls *Lease) Key() string { return ls.h.key }

// Token returns the lease's fencing token. Tokens of one entity increase
// with every acquisition, in the order the locks were held, so a write
// carrying a lower token than one already recorded comes from a holder that
// has lost the lock (see CheckFence). Tokens are at least the Redis server's
// clock in microseconds, so they keep increasing after the counter key
// expires (FenceRetention) as long as that clock does not step back. Leases
// served by one kept holding (WithKeep) share its token.
func (ls *Lease) Token() int64 { return ls.h.token }

// Context returns a context derived from the one given to the Acquire (or
// AcquireAll) that returned the lease. It is cancelled with cause ErrLost
// (see context.Cause) as soon as the lock is known to be lost, and cancelled
// when the lease is released (or, with WithKeep, kept). Run the work done
// under the lock with it, so that a lost lock aborts the transaction before
// it commits.
func (ls *Lease) Context() context.Context { return ls.ctx }

// Err returns nil while the lease is held, an error wrapping ErrLost once
// it is known to be lost, or the cause of the Acquire context's end.
func (ls *Lease) Err() error {
	if ls.ctx.Err() == nil {
		return nil
	}
	return context.Cause(ls.ctx)
}

// ValidUntil returns the local time until which the lock is known to be
// held: the start of the last successful obtain or refresh plus TTL.
func (ls *Lease) ValidUntil() time.Time {
	ls.h.mu.Lock()
	defer ls.h.mu.Unlock()
	return ls.h.validUntil
}

// Release stops the watchdog, cancels the lease's context and deletes the
// lock if (and only if) it still holds this lease's value, so releasing an
// expired lease never removes another holder's lock. It returns an error
// wrapping ErrLost if the lock was no longer held. Release always releases,
// even with WithKeep. Only the first call (of Release, ReleaseInBackground or
// ReleaseAll) has an effect; later calls return the same result (nil after a
// ReleaseInBackground that kept the lock).
func (ls *Lease) Release(ctx context.Context) error {
	if ended, _ := ls.end(false); ended && ls.h.beginRelease() {
		h := ls.h
		n, err := releaseCall(h.key, h.value).run(ctx, h.locker.redis).Int64()
		h.endRelease(n, err)
	}
	return ls.result()
}

// end ends the lease's use and reports whether this call did (ended). If keeping is set
// it also decides, in the same step, whether the holding is kept (kept): only while it is
// not known lost, its validity has not passed and the lease's context is live (a stopping
// or revoked worker gives its locks back at once). A kept holding is no longer used by
// ls; the caller must then cancel ls's context and keep the holding (Locker.keep), or
// else release it.
func (ls *Lease) end(keeping bool) (ended, kept bool) {
	h := ls.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if ls.ended {
		return false, false
	}
	ls.ended = true
	if keeping && h.lost == nil && ls.ctx.Err() == nil && time.Now().Before(h.validUntil) {
		h.cur, ls.kept = nil, true
	}
	return true, ls.kept
}

// result waits for the end of the lease's use and returns its result: nil if the holding
// was kept, else the release's.
func (ls *Lease) result() error {
	ls.h.mu.Lock()
	kept := ls.kept
	ls.h.mu.Unlock()
	if kept {
		return nil
	}
	<-ls.h.releaseDone
	return ls.h.releaseErr
}

// beginRelease is the part of a release before the script runs. It reports whether this
// call claimed the release; if so it has stopped the watchdog (a refresh that already
// started finishes first), and the caller must run the release script and pass its reply
// to endRelease.
func (h *holding) beginRelease() bool {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return false
	}
	h.released = true
	h.expiry.Stop()
	if h.refresh != nil {
		h.refresh.Stop()
	}
	h.mu.Unlock()
	h.inflight.Wait()
	return true
}

// endRelease is the part of a release after the script ran: n and err are the script's
// reply. It sets the release's result, cancels the context of the lease using the holding
// (none if it was kept idle) and wakes the calls waiting for the result.
func (h *holding) endRelease(n int64, err error) {
	// The watchdog is stopped, so lost was set before the script ran.
	h.mu.Lock()
	lost, cur := h.lost, h.cur
	h.mu.Unlock()
	switch {
	case err != nil:
		h.releaseErr = fmt.Errorf("lock: release %q: %w", h.entity, err)
	case n != 1:
		h.releaseErr = fmt.Errorf("%w: %q was not held any more at release", ErrLost, h.entity)
		if cur != nil {
			cur.cancel(h.releaseErr) // no-op if the watchdog already cancelled
		}
	case lost != nil:
		// The key still held our value after the watchdog gave up (e.g.
		// Redis was unreachable for a while), so we deleted our own lock;
		// the lease was nevertheless not known to be held throughout.
		h.releaseErr = lost
	}
	if cur != nil {
		cur.cancel(nil)
	}
	close(h.releaseDone)
}

// markLost records that the holding is lost (h.mu held) and cancels the context of the
// lease using it, if any.
func (h *holding) markLost(err error) {
	h.lost = err
	if h.cur != nil {
		h.cur.cancel(err)
	}
}
