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

	// ErrStaleToken is returned by CheckFence when a newer fencing token for
	// the entity has already been recorded: the caller's transaction must roll
	// back. Not retryable with the same lease.
	ErrStaleToken = fence.ErrStale

	// ErrInvalidEntity is returned for an empty entity.
	ErrInvalidEntity = errors.New("lock: invalid entity")

	// ErrInvalidConfig is returned by New for an option whose value is out of range.
	ErrInvalidConfig = errors.New("lock: invalid configuration")
)

// Locker hands out per-entity leases backed by Redis locks. It is safe for
// concurrent use.
type Locker struct {
	redis redis.UniversalClient
	cfg   config
	// Script arguments that never change, formatted once.
	ttlArg, retentionArg string

	// Releases started by Lease.ReleaseInBackground: background counts them, and
	// releasing maps a lock key to a channel closed when its release has ended.
	background sync.WaitGroup
	mu         sync.Mutex
	releasing  map[string]chan struct{}
}

// New returns a Locker using client (a *redis.Client, *redis.ClusterClient or
// *redis.Ring) configured by opts; every option not given takes its Default* value. An
// option out of range is an error wrapping ErrInvalidConfig.
func New(client redis.UniversalClient, opts ...Option) (*Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalidConfig)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Locker{
		redis:        client,
		cfg:          cfg,
		ttlArg:       strconv.FormatInt(cfg.ttl.Milliseconds(), 10),
		retentionArg: strconv.FormatInt(cfg.fenceRetention.Milliseconds(), 10),
		releasing:    make(map[string]chan struct{}),
	}, nil
}

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
// (WithRetryBackoff) while another holder has it, for at most the max wait
// (WithMaxWait) or until ctx ends. It returns an error wrapping
// ErrNotObtained if the lock stayed taken, or a wrapped Redis error. The
// lease must be released with Release or ReleaseInBackground.
//
// The lease's Context is derived from ctx and is cancelled with cause
// ErrLost if the lock is lost, so pass it to the work done under the lock.
func (l *Locker) Acquire(ctx context.Context, entity string) (*Lease, error) {
	if entity == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalidEntity)
	}
	leases, err := l.acquire(ctx, []string{entity})
	if err != nil {
		return nil, err
	}
	return leases[0], nil
}

// acquire obtains the leases of entities (distinct, non-empty, sorted), all or none:
// Acquire and AcquireAll. Each attempt sends every obtain script in one pipeline; if any
// entity is held by someone else, the attempt gives back what it obtained, backs off and
// retries the whole set.
func (l *Locker) acquire(ctx context.Context, entities []string) ([]*Lease, error) {
	calls := make([]scriptCall, len(entities))
	for i, e := range entities {
		calls[i] = l.obtainCall(l.Key(e), randomValue())
	}
	waitCtx, cancel := context.WithTimeout(ctx, l.cfg.maxWait)
	defer cancel()
	for i, c := range calls { // our own background releases of these entities first
		if !l.awaitRelease(waitCtx, c.keys[0]) {
			return nil, notObtained(ctx, entities[i])
		}
	}
	for n := 1; ; n++ {
		start := time.Now()
		cmds := runAll(waitCtx, l.redis, calls)
		tokens := make([]int64, len(cmds)) // > 0: obtained in this attempt
		held, failed := -1, -1
		var ferr error
		for i, cmd := range cmds {
			token, err := cmd.Int64()
			switch {
			case err == nil && token > 0:
				tokens[i] = token
			case err == nil:
				if held < 0 {
					held = i
				}
			case ferr == nil:
				failed, ferr = i, err
			}
		}
		if held < 0 && ferr == nil {
			leases := make([]*Lease, len(entities))
			for i, e := range entities {
				leases[i] = l.newLease(ctx, e, calls[i].keys[0], calls[i].args[0].(string), tokens[i], start)
			}
			return leases, nil
		}
		// All or none: give back what this attempt obtained. On an error the script may
		// still have run with its reply lost; the orphaned lock then blocks the entity for
		// at most TTL (no lease holds its value, so no one can act on it).
		rerr := l.giveBack(ctx, calls, tokens)
		switch {
		case ferr != nil && waitCtx.Err() != nil:
			return nil, notObtained(ctx, entities[failed])
		case ferr != nil:
			return nil, fmt.Errorf("lock: acquire %q: %w", entities[failed], ferr)
		case rerr != nil:
			return nil, rerr
		}
		if err := l.pause(ctx, waitCtx, entities[held], n); err != nil {
			return nil, err
		}
	}
}

// giveBack releases, in one round trip, the locks of calls whose token is positive
// (obtained in a failed attempt). It runs even when ctx has ended, for at most TTL: after
// that the locks are gone anyway. It returns the first Redis error, wrapped.
func (l *Locker) giveBack(ctx context.Context, calls []scriptCall, tokens []int64) error {
	var release []scriptCall
	for i, c := range calls {
		if tokens[i] > 0 {
			release = append(release, releaseCall(c.keys[0], c.args[0]))
		}
	}
	if len(release) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.ttl)
	defer cancel()
	for i, cmd := range runAll(rctx, l.redis, release) {
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("lock: release key %q after a partial acquire: %w", release[i].keys[0], err)
		}
	}
	return nil
}

// awaitRelease waits until no background release of key by l is in flight; false if ctx
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

// pause waits before retry n (from 1) of an acquisition of entity under waitCtx (ctx
// bounded by the max wait). It returns the error to give up with, wrapping
// ErrNotObtained, when retries are off or waitCtx ends first.
func (l *Locker) pause(ctx, waitCtx context.Context, entity string, n int) error {
	if l.cfg.noRetry {
		return fmt.Errorf("%w: %q: held by another holder (retries are off)", ErrNotObtained, entity)
	}
	if !backoff.Sleep(waitCtx, l.cfg.retry.Delay(n), nil) {
		return notObtained(ctx, entity)
	}
	return nil
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

// ReleaseInBackground releases the lease like Release, in a goroutine, and returns at
// once, so that a caller does not wait for the round trip to Redis. Acquire and
// AcquireAll of the same Locker first let such a release of the same entity end, so a
// worker that handles the same entity next does not find its own lock still held. The
// release is bounded by TTL (an unreleased lock expires by then anyway) and its error is
// dropped; use Release to see it. Locker.Wait waits for every background release.
func (ls *Lease) ReleaseInBackground() {
	if !ls.beginRelease() {
		return
	}
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
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ls.ctx), l.cfg.ttl)
		n, err := releaseCall(ls.key, ls.value).run(ctx, l.redis).Int64()
		cancel()
		ls.endRelease(n, err)
		l.mu.Lock()
		if l.releasing[ls.key] == done {
			delete(l.releasing, ls.key)
		}
		l.mu.Unlock()
		close(done)
	}()
}

// Wait waits until every release started with Lease.ReleaseInBackground has ended, or
// until ctx ends (returning its error). Call it before the process exits, after the work
// that acquires leases has stopped, so that no lock outlives its holder by up to TTL.
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
