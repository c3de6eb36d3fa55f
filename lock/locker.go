package lock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/internal/backoff"
	"github.com/choreo-saga/choreo/internal/fence"
)

var (
	// ErrNotObtained is returned by Acquire when another holder kept the
	// lock for the whole retry budget. It is retryable: back off and try
	// again later. When the Acquire context ended first, the error also
	// wraps the context's error.
	ErrNotObtained = errors.New("lock: not obtained")

	// ErrLost means a lease stopped being held before it was released: its
	// TTL passed without a successful refresh, or another holder took the
	// key. It is the cause of the lease context's cancellation and is
	// returned by Release in that case. Work done under a lost lease may
	// overlap with the next holder's; the Postgres transaction (optionally
	// with CheckFence) must reject it.
	ErrLost = errors.New("lock: lost")

	// ErrStaleToken is returned by CheckFence when a newer fencing token
	// for the entity has already been recorded: the caller's lease is no
	// longer the latest and its transaction must roll back. Not retryable
	// with the same lease.
	ErrStaleToken = fence.ErrStale

	// ErrInvalidEntity is returned for an empty entity.
	ErrInvalidEntity = errors.New("lock: invalid entity")

	// ErrInvalidOption is returned by New for an option whose value is out of range.
	ErrInvalidOption = errors.New("lock: invalid option")
)

// Locker hands out per-entity leases backed by Redis locks. It is safe for
// concurrent use.
type Locker struct {
	redis redislock.RedisClient
	cfg   config
	// Script arguments that never change, formatted once.
	ttlArg, retentionArg string

	// Releases started by Lease.ReleaseInBackground: background counts them, and
	// releasing maps a lock key to a channel closed when its release has ended.
	background sync.WaitGroup
	mu         sync.Mutex
	releasing  map[string]chan struct{}

	// Where the client can pipeline, background releases wait in pending (under mu) for
	// the next acquisition to carry them, at most releaseDelay: flushTimer, armed while
	// pending is not empty, sends them on their own (pending.go).
	pipelines    bool
	releaseDelay time.Duration // releaseDelay, or a test's
	pending      []*holding
	flushTimer   *time.Timer
	timerArmed   bool

	// With WithKeep, the holdings kept idle after their use, by lock key (under mu; keep.go).
	// Where the client can pipeline, the refreshes of kept holdings wait in refreshes
	// (under mu) for at most refreshBatchDelay, armed by refreshTimer, and go out together.
	kept              map[string]*holding
	refreshes         []*holding
	refreshTimer      *time.Timer
	refreshArmed      bool
	refreshBatchDelay time.Duration
}

// New returns a Locker using client (a *redis.Client, *redis.ClusterClient or
// *redis.Ring) configured by opts; every option not given takes its Default* value. An
// option out of range is an error wrapping ErrInvalidOption.
func New(client redislock.RedisClient, opts ...Option) (*Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	_, pipelines := client.(pipeliner)
	return &Locker{
		pipelines:    pipelines,
		releaseDelay: releaseDelay,
		redis:        client,
		cfg:          cfg,
		ttlArg:       strconv.FormatInt(cfg.ttl.Milliseconds(), 10),
		retentionArg: strconv.FormatInt(cfg.fenceRetention.Milliseconds(), 10),
		releasing:    make(map[string]chan struct{}),
		kept:         make(map[string]*holding),
		// A kept holding's refresh may wait for others this long; its lock stays valid
		// for at least TTL − refresh period − this (a refresh is due every period).
		refreshBatchDelay: cfg.refreshEvery / refreshBatchDivisor,
	}, nil
}

// refreshBatchDivisor: the refreshes of kept holdings wait at most refreshEvery /
// refreshBatchDivisor for one another (see Locker.refreshBatchDelay).
const refreshBatchDivisor = 8

// Key returns the Redis key of entity's lock.
func (l *Locker) Key(entity string) string {
	return l.cfg.namespace + "{" + entity + "}"
}

// obtainScript sets the lock (SET NX PX) and, in the same atomic step,
// issues the lease's fencing token, so obtaining a lease is one round trip
// and no other holder can come between the lock and its token. It returns
// -1 when the lock is held by someone else. The token is
// max(counter+1, Redis server time in µs): it grows by at least one per
// acquisition and never falls back when the counter key expires or is lost
// in a failover.
//
// KEYS: lock, fence counter. ARGV: value, TTL ms, fence retention ms.
var obtainScript = redis.NewScript(`
if not redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return -1 end
local t = redis.call("time")
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = redis.call("incr", KEYS[2])
if n < floor then
  n = floor
  redis.call("set", KEYS[2], string.format("%.0f", n))
end
redis.call("pexpire", KEYS[2], ARGV[3])
return n
`)

// refreshScript extends the lock to a full TTL if it still holds the
// lease's value: 1 if extended, 0 if the lock is gone or someone else's.
// KEYS: lock. ARGV: value, TTL ms.
var refreshScript = redis.NewScript(`
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end
return 0
`)

// releaseScript deletes the lock if it still holds the lease's value: 1 if
// deleted, 0 if the lock is gone or someone else's.
// KEYS: lock. ARGV: value.
var releaseScript = redis.NewScript(`
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end
return 0
`)

// randomValue returns the lock value that identifies one lease: 128 random
// bits, URL-safe base64.
func randomValue() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Acquire obtains the lock of entity, retrying with the retry backoff
// (WithRetryBackoff) while another holder has it, for at most the max wait (WithMaxWait) or until ctx ends. It returns
// an error wrapping ErrNotObtained if the lock stayed taken, or a wrapped
// Redis error. The lease must be released with Release.
//
// The lease's Context is derived from ctx and is cancelled with cause
// ErrLost if the lock is lost, so pass it to the work done under the lock.
//
// With WithKeep, a holding of the entity kept idle on l is taken instead, without a round
// trip, at the start and before every retry (see "Kept leases" in the package doc).
func (l *Locker) Acquire(ctx context.Context, entity string) (*Lease, error) {
	if entity == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalidEntity)
	}
	key := l.Key(entity)
	keeps := l.cfg.keep > 0 && ctx.Err() == nil
	if keeps {
		if ls := l.reuse(ctx, key); ls != nil {
			return ls, nil
		}
	}
	value := randomValue()
	call := l.obtainCall(key, value)
	waitCtx, cancel := context.WithTimeout(ctx, l.cfg.maxWait)
	defer cancel()
	carry := l.takeForAcquire(ctx)
	if !l.awaitOthers(waitCtx, key, &carry) {
		return nil, notObtained(ctx, entity)
	}
	r := retrier{policy: l.cfg.retry, none: l.cfg.noRetry}
	defer r.stop()
	for {
		start := time.Now()
		var token int64
		var err error
		if carry != nil { // the first attempt carries the queued releases
			token, err = l.obtainCarrying(waitCtx, carry, []scriptCall{call})[0].Int64()
			carry = nil
		} else {
			token, err = call.run(waitCtx, l.redis).Int64()
		}
		switch {
		case err == nil && token > 0:
			return l.newLease(ctx, entity, key, value, token, start), nil
		case err == nil:
			// Held by someone else: retry below.
		// On an error the script may still have run with its reply lost;
		// the orphaned lock then blocks the entity for at most TTL (no
		// lease holds its value, so no one can act on it). A clean-up
		// call here would double the time Acquire takes to fail while
		// Redis is unreachable.
		case waitCtx.Err() != nil:
			return nil, notObtained(ctx, entity)
		default:
			return nil, fmt.Errorf("lock: acquire %q: %w", entity, err)
		}

		if err := r.pause(waitCtx); err != nil {
			return nil, notObtainedAfter(ctx, entity, err)
		}
		if keeps {
			// Another lease of this Locker may have held the entity and kept it.
			if ls := l.reuse(ctx, key); ls != nil {
				return ls, nil
			}
		}
	}
}

// errExhausted is returned by retrier.pause when the retry policy gives up.
var errExhausted = errors.New("retries exhausted")

// retrier waits between the attempts of one acquisition as its Locker's retry backoff
// says.
type retrier struct {
	policy  backoff.Policy
	none    bool // WithoutRetry
	retries int
	timer   *time.Timer
}

// pause waits for the next backoff. It returns errExhausted at once when the policy has
// no retry left, or ctx's error if ctx ends first.
func (r *retrier) pause(ctx context.Context) error {
	if r.none {
		return errExhausted
	}
	r.retries++
	d := r.policy.Delay(r.retries)
	if r.timer == nil {
		r.timer = time.NewTimer(d)
	} else {
		r.timer.Reset(d)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-r.timer.C:
		return nil
	}
}

func (r *retrier) stop() {
	if r.timer != nil {
		r.timer.Stop()
	}
}

// notObtainedAfter is the error of an acquisition of entity whose retrier's pause
// failed with err.
func notObtainedAfter(ctx context.Context, entity string, err error) error {
	if errors.Is(err, errExhausted) {
		return fmt.Errorf("%w: %q: %w", ErrNotObtained, entity, err)
	}
	return notObtained(ctx, entity)
}

func notObtained(ctx context.Context, entity string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %q: %w", ErrNotObtained, entity, err)
	}
	return fmt.Errorf("%w: %q: still held after max wait", ErrNotObtained, entity)
}

// Do acquires entity's lock, runs fn with the lease (and the lease's
// context), and releases the lock. It returns Acquire's error, else fn's
// error, else Release's error (which wraps ErrLost if the lock expired while
// fn ran).
func (l *Locker) Do(ctx context.Context, entity string, fn func(ctx context.Context, lease *Lease) error) error {
	lease, err := l.Acquire(ctx, entity)
	if err != nil {
		return err
	}
	ferr := fn(lease.Context(), lease)
	rerr := lease.Release(context.WithoutCancel(ctx))
	if ferr != nil {
		return ferr
	}
	return rerr
}

// ReleaseInBackground releases the lease like Release, later, and returns at once, so
// that a caller does not wait for the round trip to Redis. Where the client can pipeline,
// the release goes out with the Locker's next Acquire or AcquireAll (any entity, any
// goroutine) in its pipeline, or on its own after at most a millisecond when none comes
// (see the package doc); otherwise it runs in a goroutine. Acquire and AcquireAll of the
// same Locker first let such a release of the same entity end (or send it first in their
// pipeline), so a worker that handles the same entity next does not find its own lock
// still held. The release is bounded by TTL (an unreleased lock expires by then anyway)
// and its error is dropped; use Release to see it. Locker.Wait sends the queued releases
// and waits for every background release, e.g. before exiting.
//
// With WithKeep, the lock is kept instead (its lease's Context is cancelled, the lock
// stays held) for the next Acquire of the entity on the Locker, and released once it
// stayed unused for the keep duration or at Wait; a lock known to be lost, or whose
// lease's Context has ended, is released as above.
func (ls *Lease) ReleaseInBackground() {
	l := ls.h.locker
	ended, kept := ls.end(l.cfg.keep > 0)
	switch {
	case !ended:
		return // another call ended the lease
	case kept:
		ls.cancel(nil)
		l.keep(ls.h)
		return
	}
	if ls.h.beginRelease() {
		l.releaseInBackground(ls.h, ls.ctx)
	}
}

// releaseInBackground releases h, whose release the caller claimed (beginRelease), in the
// background: queued for the next acquisition where the client can pipeline, else in a
// goroutine under a context with parent's values. Wait waits for it.
func (l *Locker) releaseInBackground(h *holding, parent context.Context) {
	if l.pipelines {
		l.queueRelease(h)
		return
	}
	done := make(chan struct{})
	l.mu.Lock()
	prev := l.releasing[h.key] // another holding of the key still releasing (expired leases)
	l.releasing[h.key] = done
	l.mu.Unlock()
	l.background.Add(1)
	go func() {
		defer l.background.Done()
		if prev != nil {
			<-prev
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), l.cfg.ttl)
		n, err := releaseCall(h.key, h.value).run(ctx, l.redis).Int64()
		cancel()
		h.endRelease(n, err)
		l.mu.Lock()
		if l.releasing[h.key] == done {
			delete(l.releasing, h.key)
		}
		l.mu.Unlock()
		close(done)
	}()
}

// Wait releases every lock kept idle (WithKeep) and waits until every release started
// with Lease.ReleaseInBackground has ended, or until ctx ends (returning its error). Call
// it before the process exits, after the work that acquires leases has stopped, so that no
// lock outlives its holder by up to TTL.
func (l *Locker) Wait(ctx context.Context) error {
	l.releaseAllKept()
	if carry := l.takeForAcquire(context.Background()); carry != nil {
		go l.sendReleases(carry) // no need to wait for a next acquisition
	}
	done := make(chan struct{})
	go func() {
		l.background.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
