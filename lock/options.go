package lock

import (
	"fmt"
	"time"

	"github.com/choreo-saga/choreo/internal/backoff"
)

// Defaults of the options of New.
const (
	// DefaultNamespace prefixes every Redis key (WithNamespace).
	DefaultNamespace = "choreo:lock:"
	// DefaultTTL is how long a lock stays valid without a refresh (WithTTL).
	DefaultTTL = 10 * time.Second
	// DefaultRefreshDivisor: the watchdog refreshes every TTL/DefaultRefreshDivisor
	// unless WithRefreshEvery says otherwise.
	DefaultRefreshDivisor = 3
	// DefaultRetryBase and DefaultRetryMax bound Acquire's full-jitter backoff while the
	// lock is held by someone else (WithRetryBackoff).
	DefaultRetryBase = 10 * time.Millisecond
	DefaultRetryMax  = 500 * time.Millisecond
	// DefaultFenceRetention is how long an entity's fencing counter is kept in Redis
	// after its last acquisition (WithFenceRetention).
	DefaultFenceRetention = 24 * time.Hour
	// DefaultKeep is how long ReleaseInBackground keeps a lock for the next Acquire of its
	// entity (WithKeep): not at all.
	DefaultKeep time.Duration = 0
)

// config is the Locker's configuration, every default applied.
type config struct {
	namespace      string
	ttl            time.Duration
	refreshEvery   time.Duration // 0: no watchdog
	watchdog       bool
	retry          backoff.Policy
	noRetry        bool
	maxWait        time.Duration // 0: TTL
	fenceRetention time.Duration
	keep           time.Duration // 0: release at once
	err            error         // the first invalid option
}

// Option configures a Locker (New).
type Option func(*config)

func (c *config) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
	}
}

// WithNamespace prefixes every Redis key with ns (default DefaultNamespace). The lock of
// entity E lives at ns+"{"+E+"}" and its fencing counter at the same key plus ":fence";
// the braces make both keys one Redis Cluster hash slot. ns must not be empty.
func WithNamespace(ns string) Option {
	return func(c *config) {
		if ns == "" {
			c.invalid("empty namespace")
		}
		c.namespace = ns
	}
}

// WithTTL sets how long a lock stays valid without a refresh, bounding how long a crashed
// holder blocks others (default DefaultTTL). It must be positive.
func WithTTL(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("TTL %v is not positive", d)
		}
		c.ttl = d
	}
}

// WithRefreshEvery sets the period of the lease's watchdog, which extends the lock to a
// full TTL while the lease is held, so handlers may run longer than TTL (default
// TTL/DefaultRefreshDivisor). It must be positive and below TTL/2.
func WithRefreshEvery(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("refresh period %v is not positive", d)
		}
		c.refreshEvery, c.watchdog = d, true
	}
}

// WithoutWatchdog disables the watchdog: a lease is then lost TTL after it was obtained,
// however long its work runs.
func WithoutWatchdog() Option {
	return func(c *config) { c.refreshEvery, c.watchdog = 0, false }
}

// WithRetryBackoff sets Acquire's backoff while another holder has the lock: exponential
// with full jitter, before retry n (from 0) a uniformly random wait in
// (0, min(max, base·2ⁿ)] (defaults DefaultRetryBase and DefaultRetryMax). Randomising
// the whole interval spreads contending callers out instead of letting them retry in
// lock-step; WithMaxWait and the Acquire context bound the retries. base must be positive
// and max at least base.
func WithRetryBackoff(base, max time.Duration) Option {
	return func(c *config) {
		if base <= 0 || max < base {
			c.invalid("retry backoff base %v, max %v: want 0 < base <= max", base, max)
		}
		c.retry, c.noRetry = backoff.Policy{Base: base, Max: max}, false
	}
}

// WithoutRetry makes Acquire and AcquireAll try exactly once.
func WithoutRetry() Option {
	return func(c *config) { c.noRetry = true }
}

// WithMaxWait bounds how long one Acquire call keeps retrying, unless its context ends
// first (default: the TTL). It must be positive.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("max wait %v is not positive", d)
		}
		c.maxWait = d
	}
}

// WithFenceRetention sets how long an entity's fencing counter is kept in Redis after its
// last acquisition (default DefaultFenceRetention). Tokens stay monotonic after the
// counter expires (see Lease.Token), so this only bounds memory. It must be positive.
func WithFenceRetention(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("fence retention %v is not positive", d)
		}
		c.fenceRetention = d
	}
}

// WithKeep makes Lease.ReleaseInBackground keep the lock for up to d instead of releasing
// it: the lock stays held in Redis (its watchdog keeps refreshing it) and the next Acquire
// of the entity on the same Locker, from any goroutine, gets it back within d without a
// Redis round trip, with the same fencing token and a Context derived from its own
// context. A lock kept unused for d is released (with the Locker's next acquisition, as
// background releases are), and Wait releases every kept lock at once. Release and
// ReleaseAll always release. Default DefaultKeep: every lock is released after its use.
//
// The cost is contention across Lockers: another instance (or another Locker of this
// process) that wants a kept entity waits for up to d, plus its retry backoff, until the
// lock is released; so keep d short, and use WithKeep where an entity's events mostly
// arrive at one consumer (a partition keyed by the entity), as consumer.Lock's are. See
// "Kept leases" in the package doc. d must not be negative, must be below the TTL and
// needs the watchdog (not WithoutWatchdog).
func WithKeep(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("keep %v is negative", d)
		}
		c.keep = d
	}
}

// newConfig applies opts over the defaults and validates the result.
func newConfig(opts []Option) (config, error) {
	c := config{
		namespace:      DefaultNamespace,
		ttl:            DefaultTTL,
		watchdog:       true,
		retry:          backoff.Policy{Base: DefaultRetryBase, Max: DefaultRetryMax},
		fenceRetention: DefaultFenceRetention,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.err != nil {
		return c, c.err
	}
	if c.watchdog {
		if c.refreshEvery == 0 {
			c.refreshEvery = c.ttl / DefaultRefreshDivisor
		}
		if c.refreshEvery >= c.ttl/2 {
			return c, fmt.Errorf("%w: refresh period %v is not below TTL/2 (%v)", ErrInvalidOption, c.refreshEvery, c.ttl/2)
		}
	}
	if c.keep > 0 && (c.keep >= c.ttl || !c.watchdog) {
		return c, fmt.Errorf("%w: keep %v needs the watchdog and must be below the TTL (%v)", ErrInvalidOption, c.keep, c.ttl)
	}
	if c.maxWait == 0 {
		c.maxWait = c.ttl
	}
	return c, nil
}
