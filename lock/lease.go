package lock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Lease is one possession of an entity's lock, from the Acquire (or AcquireAll) that
// returned it until its Release, ReleaseInBackground or ReleaseAll. Its methods are safe
// for concurrent use.
type Lease struct {
	locker             *Locker
	entity, key, value string
	token              int64

	// ctx is derived from the Acquire context; it is cancelled with cause ErrLost when
	// the lock is lost, and when the lease is released.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// The watchdog is two timers, not a goroutine: refresh (nil without watchdog)
	// extends the lock, expiry marks the lease lost when validUntil passes. Their
	// callbacks, the releases and the fields below synchronise on mu; inflight counts
	// running refreshes.
	mu         sync.Mutex
	validUntil time.Time
	released   bool
	lost       error // wraps ErrLost once the lease is known to be lost
	refresh    *time.Timer
	expiry     *time.Timer
	inflight   sync.WaitGroup

	// The release that set released runs the release script, sets releaseErr and
	// closes releaseDone; other calls wait for releaseDone and return releaseErr.
	releaseDone chan struct{}
	releaseErr  error
}

// Entity returns the entity the lease locks.
func (ls *Lease) Entity() string { return ls.entity }

// Key returns the Redis key of the lock; Lease.CheckFence records the
// fencing token under this key.
func (ls *Lease) Key() string { return ls.key }

// Token returns the lease's fencing token. Tokens of one entity increase
// with every acquisition, in the order the locks were held, so a write
// carrying a lower token than one already recorded comes from a holder that
// has lost the lock (see CheckFence). Tokens are at least the Redis server's
// clock in microseconds, so they keep increasing after the counter key
// expires (WithFenceRetention) as long as that clock does not step back.
func (ls *Lease) Token() int64 { return ls.token }

// Context returns a context derived from the one given to the Acquire (or
// AcquireAll) that returned the lease. It is cancelled with cause ErrLost
// (see context.Cause) as soon as the lock is known to be lost, and cancelled
// when the lease is released. Run the work done under the lock with it, so
// that a lost lock aborts the transaction before it commits.
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
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.validUntil
}

// Release stops the watchdog, cancels the lease's context and deletes the
// lock if (and only if) it still holds this lease's value, so releasing an
// expired lease never removes another holder's lock. It returns an error
// wrapping ErrLost if the lock was no longer held. Only the first call (of
// Release, ReleaseInBackground or ReleaseAll) has an effect; later calls
// return the same result.
func (ls *Lease) Release(ctx context.Context) error {
	if ls.beginRelease() {
		n, err := releaseCall(ls.key, ls.value).run(ctx, ls.locker.redis).Int64()
		ls.endRelease(n, err)
	}
	<-ls.releaseDone
	return ls.releaseErr
}

// beginRelease is the part of a release before the script runs. It reports whether this
// call claimed the release; if so it has stopped the watchdog (a refresh that already
// started finishes first), and the caller must run the release script and pass its reply
// to endRelease.
func (ls *Lease) beginRelease() bool {
	ls.mu.Lock()
	if ls.released {
		ls.mu.Unlock()
		return false
	}
	ls.released = true
	ls.expiry.Stop()
	if ls.refresh != nil {
		ls.refresh.Stop()
	}
	ls.mu.Unlock()
	ls.inflight.Wait()
	return true
}

// endRelease is the part of a release after the script ran: n and err are the script's
// reply. It sets the release's result, cancels the lease's context and wakes the calls
// waiting for the result.
func (ls *Lease) endRelease(n int64, err error) {
	// The watchdog is stopped, so lost was set before the script ran.
	ls.mu.Lock()
	lost := ls.lost
	ls.mu.Unlock()
	switch {
	case err != nil:
		ls.releaseErr = fmt.Errorf("lock: release %q: %w", ls.entity, err)
	case n != 1:
		ls.releaseErr = fmt.Errorf("%w: %q was not held any more at release", ErrLost, ls.entity)
		ls.cancel(ls.releaseErr) // no-op if the watchdog already cancelled
	case lost != nil:
		// The key still held our value after the watchdog gave up (e.g.
		// Redis was unreachable for a while), so we deleted our own lock;
		// the lease was nevertheless not known to be held throughout.
		ls.releaseErr = lost
	}
	ls.cancel(nil)
	close(ls.releaseDone)
}

// markLost records that the lease is lost (ls.mu held) and cancels its context.
func (ls *Lease) markLost(err error) {
	ls.lost = err
	ls.cancel(err)
}
