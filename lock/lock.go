package lock

import (
	"context"
	"errors"
	"fmt"
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

// Locker hands out per-entity leases backed by Redis locks (via
// github.com/bsm/redislock). It is safe for concurrent use.
type Locker struct {
	rl    *redislock.Client
	redis redislock.RedisClient
	opts  Options
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
	return &Locker{rl: redislock.New(client), redis: client, opts: opts}
}

// Options returns the Locker's options with defaults filled in.
func (l *Locker) Options() Options { return l.opts }

// Key returns the Redis key of entity's lock.
func (l *Locker) Key(entity string) string {
	return l.opts.Namespace + "{" + entity + "}"
}

// fenceScript issues the next fencing token, but only while the caller
// still holds the lock, so tokens are ordered like the holders: a holder
// that lost its lock before reaching this point gets no token (-1).
// The token is max(counter+1, Redis server time in µs): it grows by at least
// one per acquisition and never falls back when the counter key expires or
// is lost in a failover.
var fenceScript = redis.NewScript(`
if redis.call("get", KEYS[1]) ~= ARGV[1] then return -1 end
local t = redis.call("time")
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = redis.call("incr", KEYS[2])
if n < floor then
  n = floor
  redis.call("set", KEYS[2], string.format("%.0f", n))
end
redis.call("pexpire", KEYS[2], ARGV[2])
return n
`)

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
	fenceKey := key + ":fence"
	waitCtx, cancel := context.WithTimeout(ctx, l.opts.MaxWait)
	defer cancel()
	retry := l.opts.Retry()
	var wait *time.Timer
	for {
		start := time.Now()
		lk, err := l.rl.Obtain(waitCtx, key, l.opts.TTL, nil)
		switch {
		case err == nil:
			token, err := fenceScript.Run(waitCtx, l.redis, []string{key, fenceKey},
				lk.Token()+lk.Metadata(), l.opts.FenceRetention.Milliseconds()).Int64()
			if err == nil && token > 0 {
				return l.newLease(ctx, entity, key, lk, token, start), nil
			}
			// Either Redis failed, or the lock expired between the two
			// calls (-1: the holder was paused longer than TTL). Never keep
			// a lock without a token.
			_ = lk.Release(context.WithoutCancel(ctx))
			if err != nil {
				if waitCtx.Err() != nil {
					return nil, notObtained(ctx, entity)
				}
				return nil, fmt.Errorf("lock: acquire %q: fencing token: %w", entity, err)
			}
		case errors.Is(err, redislock.ErrNotObtained):
		case waitCtx.Err() != nil:
			return nil, notObtained(ctx, entity)
		default:
			return nil, fmt.Errorf("lock: acquire %q: %w", entity, err)
		}

		backoff := retry.NextBackoff()
		if backoff < 1 {
			return nil, fmt.Errorf("%w: %q: retries exhausted", ErrNotObtained, entity)
		}
		if wait == nil {
			wait = time.NewTimer(backoff)
			defer wait.Stop()
		} else {
			wait.Reset(backoff)
		}
		select {
		case <-waitCtx.Done():
			return nil, notObtained(ctx, entity)
		case <-wait.C:
		}
	}
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
	lk     *redislock.Lock
	token  int64

	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   chan struct{}
	done   chan struct{}

	mu         sync.Mutex
	validUntil time.Time

	releaseOnce sync.Once
	releaseErr  error
}

func (l *Locker) newLease(parent context.Context, entity, key string, lk *redislock.Lock, token int64, start time.Time) *Lease {
	ctx, cancel := context.WithCancelCause(parent)
	ls := &Lease{
		locker:     l,
		entity:     entity,
		key:        key,
		lk:         lk,
		token:      token,
		ctx:        ctx,
		cancel:     cancel,
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
		validUntil: start.Add(l.opts.TTL),
	}
	go ls.watchdog()
	return ls
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

// Context returns a context derived from the one given to Acquire. It is
// cancelled with cause ErrLost (see context.Cause) as soon as the lease is
// known to be lost, and cancelled when the lease is released. Run the work
// done under the lock with it, so that a lost lock aborts the transaction
// before it commits.
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
// wrapping ErrLost if the lock was no longer held. Only the first call has
// an effect; later calls return the same result.
func (ls *Lease) Release(ctx context.Context) error {
	ls.releaseOnce.Do(func() {
		close(ls.stop)
		<-ls.done
		var lost error
		if ls.ctx.Err() != nil && errors.Is(context.Cause(ls.ctx), ErrLost) {
			lost = context.Cause(ls.ctx)
		}
		err := ls.lk.Release(ctx)
		switch {
		case errors.Is(err, redislock.ErrLockNotHeld):
			ls.releaseErr = fmt.Errorf("%w: %q was not held any more at release", ErrLost, ls.entity)
			ls.cancel(ls.releaseErr) // no-op if the watchdog already cancelled
		case err != nil:
			ls.releaseErr = fmt.Errorf("lock: release %q: %w", ls.entity, err)
		case lost != nil:
			// The key still held our value after the watchdog gave up
			// (e.g. Redis was unreachable for a while), so we deleted our
			// own lock; the lease was nevertheless not known to be held
			// throughout.
			ls.releaseErr = lost
		}
		ls.cancel(nil)
	})
	return ls.releaseErr
}

// watchdog refreshes the lock every RefreshEvery and cancels the lease's
// context with ErrLost when the lock is gone or when no refresh succeeded
// within TTL of the previous one.
func (ls *Lease) watchdog() {
	defer close(ls.done)
	opts := ls.locker.opts
	expiry := time.NewTimer(time.Until(ls.ValidUntil()))
	defer expiry.Stop()
	var refreshC <-chan time.Time
	if opts.RefreshEvery > 0 {
		refresh := time.NewTimer(opts.RefreshEvery)
		defer refresh.Stop()
		refreshC = refresh.C
		for {
			select {
			case <-ls.stop:
				return
			case <-ls.ctx.Done():
				return
			case <-expiry.C:
				ls.cancel(fmt.Errorf("%w: %q not refreshed within TTL %v", ErrLost, ls.entity, opts.TTL))
				return
			case <-refreshC:
			}
			start := time.Now()
			rctx, cancel := context.WithDeadline(ls.ctx, ls.ValidUntil())
			err := ls.lk.Refresh(rctx, opts.TTL, nil)
			cancel()
			switch {
			case err == nil:
				ls.mu.Lock()
				ls.validUntil = start.Add(opts.TTL)
				ls.mu.Unlock()
				expiry.Reset(time.Until(start.Add(opts.TTL)))
				refresh.Reset(opts.RefreshEvery)
			case errors.Is(err, redislock.ErrNotObtained):
				ls.cancel(fmt.Errorf("%w: %q is no longer held by this lease", ErrLost, ls.entity))
				return
			default:
				// Transient Redis error: retry sooner; expiry decides
				// when to give up.
				refresh.Reset(max(opts.RefreshEvery/4, time.Millisecond))
			}
		}
	}
	select {
	case <-ls.stop:
	case <-ls.ctx.Done():
	case <-expiry.C:
		ls.cancel(fmt.Errorf("%w: %q expired after TTL %v (no watchdog)", ErrLost, ls.entity, opts.TTL))
	}
}
