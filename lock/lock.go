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
)

// Defaults for the zero values of Options.
const (
	DefaultNamespace      = "choreo:lock:"
	DefaultTTL            = 10 * time.Second
	DefaultRetryBase      = 10 * time.Millisecond
	DefaultRetryMax       = 500 * time.Millisecond
	DefaultFenceRetention = 24 * time.Hour
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
	ErrStaleToken = errors.New("lock: stale fencing token")

	// ErrInvalidEntity is returned for an empty entity.
	ErrInvalidEntity = errors.New("lock: invalid entity")
)

// Options configures a Locker. The zero value is valid: every field has a
// documented default.
type Options struct {
	// Namespace prefixes every Redis key. The lock of entity E lives at
	// Namespace+"{"+E+"}" and its fencing counter at the same key plus
	// ":fence"; the braces make both keys one Redis Cluster hash slot.
	// Default: DefaultNamespace ("choreo:lock:").
	Namespace string

	// TTL is how long a lock stays valid without a refresh, bounding how
	// long a crashed holder blocks others. Default: DefaultTTL (10s).
	TTL time.Duration

	// RefreshEvery is the period of the lease's watchdog, which extends the
	// lock to a full TTL while the lease is held, so handlers may run longer
	// than TTL. Default: TTL/3. Values of TTL/2 or more are lowered to TTL/2.
	// A negative value disables the watchdog: the lease is then lost TTL
	// after it was obtained.
	RefreshEvery time.Duration

	// Retry is the retry policy of Acquire while the lock is held by
	// someone else. Default: FullJitter(DefaultRetryBase, DefaultRetryMax).
	Retry RetryPolicy

	// MaxWait bounds how long one Acquire call keeps retrying, unless its
	// context ends first. Default: TTL.
	MaxWait time.Duration

	// FenceRetention is how long an entity's fencing counter is kept in
	// Redis after its last acquisition. Tokens stay monotonic after the
	// counter expires (see Lease.Token), so this only bounds memory.
	// Default: DefaultFenceRetention (24h).
	FenceRetention time.Duration
}

// Locker hands out per-entity leases backed by Redis locks. It is safe for
// concurrent use.
type Locker struct {
	redis redislock.RedisClient
	opts  Options
	// Script arguments that never change, formatted once.
	ttlArg, retentionArg string

	// Releases started by Lease.ReleaseInBackground: background counts them, and
	// releasing maps a lock key to a channel closed when its release has ended.
	background sync.WaitGroup
	mu         sync.Mutex
	releasing  map[string]chan struct{}
}

// New returns a Locker using client (a *redis.Client, *redis.ClusterClient
// or *redis.Ring) and opts, with defaults filled in.
func New(client redislock.RedisClient, opts Options) *Locker {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	switch {
	case opts.RefreshEvery == 0:
		opts.RefreshEvery = opts.TTL / 3
	case opts.RefreshEvery >= opts.TTL/2:
		opts.RefreshEvery = opts.TTL / 2
	}
	if opts.Retry == nil {
		opts.Retry = FullJitter(DefaultRetryBase, DefaultRetryMax)
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = opts.TTL
	}
	if opts.FenceRetention <= 0 {
		opts.FenceRetention = DefaultFenceRetention
	}
	return &Locker{
		redis:        client,
		opts:         opts,
		ttlArg:       strconv.FormatInt(opts.TTL.Milliseconds(), 10),
		retentionArg: strconv.FormatInt(opts.FenceRetention.Milliseconds(), 10),
		releasing:    make(map[string]chan struct{}),
	}
}

// Options returns the Locker's options with defaults filled in.
func (l *Locker) Options() Options { return l.opts }

// Key returns the Redis key of entity's lock.
func (l *Locker) Key(entity string) string {
	return l.opts.Namespace + "{" + entity + "}"
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

// Acquire obtains the lock of entity, retrying with the Retry policy while
// another holder has it, for at most MaxWait or until ctx ends. It returns
// an error wrapping ErrNotObtained if the lock stayed taken, or a wrapped
// Redis error. The lease must be released with Release.
//
// The lease's Context is derived from ctx and is cancelled with cause
// ErrLost if the lock is lost, so pass it to the work done under the lock.
func (l *Locker) Acquire(ctx context.Context, entity string) (*Lease, error) {
	if entity == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalidEntity)
	}
	key := l.Key(entity)
	keys := []string{key, key + ":fence"}
	value := randomValue()
	waitCtx, cancel := context.WithTimeout(ctx, l.opts.MaxWait)
	defer cancel()
	if !l.awaitRelease(waitCtx, key) {
		return nil, notObtained(ctx, entity)
	}
	r := retrier{policy: l.opts.Retry}
	defer r.stop()
	for {
		start := time.Now()
		token, err := obtainScript.Run(waitCtx, l.redis, keys, value, l.ttlArg, l.retentionArg).Int64()
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
	}
}

// errExhausted is returned by retrier.pause when the retry policy gives up.
var errExhausted = errors.New("retries exhausted")

// retrier waits between the attempts of one acquisition as its Locker's RetryPolicy says.
type retrier struct {
	policy   RetryPolicy
	strategy RetryStrategy // created on the first retry only
	timer    *time.Timer
}

// pause waits for the next backoff. It returns errExhausted at once when the policy has
// no retry left, or ctx's error if ctx ends first.
func (r *retrier) pause(ctx context.Context) error {
	if r.strategy == nil {
		r.strategy = r.policy()
	}
	d := r.strategy.NextBackoff()
	if d < 1 {
		return errExhausted
	}
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

// Lease is one holding of an entity's lock. Its methods are safe for
// concurrent use.
type Lease struct {
	locker *Locker
	entity string
	key    string
	value  string
	token  int64

	ctx    context.Context
	cancel context.CancelCauseFunc

	// The watchdog is two timers, not a goroutine: refresh (nil without
	// watchdog) extends the lock, expiry cancels ctx with ErrLost when
	// validUntil passes. Their callbacks, Release and the fields below
	// synchronise on mu; inflight counts running refreshes.
	mu         sync.Mutex
	validUntil time.Time
	released   bool
	refresh    *time.Timer
	expiry     *time.Timer
	inflight   sync.WaitGroup

	// The first Release or ReleaseAll to set released runs the release
	// script, sets releaseErr and closes releaseDone; other calls wait for
	// releaseDone and return releaseErr.
	releaseDone chan struct{}
	releaseErr  error
}

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
		validUntil:  start.Add(l.opts.TTL),
		releaseDone: make(chan struct{}),
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.expiry = time.AfterFunc(time.Until(ls.validUntil), ls.expire)
	if l.opts.RefreshEvery > 0 {
		ls.refresh = time.AfterFunc(l.opts.RefreshEvery, ls.extend)
	}
	return ls
}

// ReleaseInBackground releases the lease like Release, in a goroutine, and returns at
// once, so that a caller does not wait for the round trip to Redis. Acquire and AcquireAll
// of the same Locker first wait for such a release of the same entity to end, so a worker
// that handles the same entity next does not find its own lock still held. The release is
// bounded by TTL (an unreleased lock expires by then anyway) and its error is dropped; use
// Release to see it. Locker.Wait waits for every background release, e.g. before exiting.
func (ls *Lease) ReleaseInBackground() {
	l := ls.locker
	done := make(chan struct{})
	l.mu.Lock()
	prev := l.releasing[ls.key] // another lease of the key still releasing (expired leases)
	l.releasing[ls.key] = done
	l.mu.Unlock()
	l.background.Add(1)
	go func() {
		defer l.background.Done()
		if prev != nil {
			<-prev
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ls.ctx), l.opts.TTL)
		_ = ls.Release(ctx)
		cancel()
		l.mu.Lock()
		if l.releasing[ls.key] == done {
			delete(l.releasing, ls.key)
		}
		l.mu.Unlock()
		close(done)
	}()
}

// awaitRelease waits until no background release of key is in flight; false if ctx
// ended first.
func (l *Locker) awaitRelease(ctx context.Context, key string) bool {
	l.mu.Lock()
	done := l.releasing[key]
	l.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// Wait waits until every release started with Lease.ReleaseInBackground has ended, or
// until ctx ends (returning its error). Call it before the process exits, after the
// work that acquires leases has stopped, so that no lock outlives its holder by up to TTL.
func (l *Locker) Wait(ctx context.Context) error {
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
// expires (FenceRetention) as long as that clock does not step back.
func (ls *Lease) Token() int64 { return ls.token }

// Context returns a context derived from the one given to Acquire (or
// AcquireAll). It is cancelled with cause ErrLost (see context.Cause) as
// soon as the lease is known to be lost, and cancelled when the lease is
// released. Run the work done under the lock with it, so that a lost lock
// aborts the transaction before it commits.
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
// Release or ReleaseAll) has an effect; later calls return the same result.
func (ls *Lease) Release(ctx context.Context) error {
	if ls.beginRelease() {
		n, err := releaseScript.Run(ctx, ls.locker.redis, []string{ls.key}, ls.value).Int64()
		ls.endRelease(n, err)
	}
	<-ls.releaseDone
	return ls.releaseErr
}

// beginRelease is the part of a release before the script runs. It reports
// whether this call claimed the release; if so it has stopped the watchdog
// (a refresh that already started finishes first), and the caller must run
// the release script and pass its reply to endRelease.
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

// endRelease is the part of a release after the script ran: n and err are
// the script's reply. It sets the release's result, cancels the lease's
// context and wakes the calls waiting for the result.
func (ls *Lease) endRelease(n int64, err error) {
	// The watchdog is stopped, so a cancellation with ErrLost happened
	// before the script ran.
	var lost error
	if ls.ctx.Err() != nil && errors.Is(context.Cause(ls.ctx), ErrLost) {
		lost = context.Cause(ls.ctx)
	}
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
		ls.cancel(fmt.Errorf("%w: %q expired after TTL %v (no watchdog)", ErrLost, ls.entity, ls.locker.opts.TTL))
		return
	}
	ls.refresh.Stop()
	ls.cancel(fmt.Errorf("%w: %q not refreshed within TTL %v", ErrLost, ls.entity, ls.locker.opts.TTL))
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

	opts := ls.locker.opts
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
		ls.validUntil = start.Add(opts.TTL)
		ls.expiry.Reset(time.Until(ls.validUntil))
		ls.refresh.Reset(opts.RefreshEvery)
	case err == nil:
		ls.expiry.Stop()
		ls.cancel(fmt.Errorf("%w: %q is no longer held by this lease", ErrLost, ls.entity))
	default:
		ls.refresh.Reset(max(opts.RefreshEvery/4, time.Millisecond))
	}
}
