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
}

// Option configures a Locker (New). An invalid value makes New return an error wrapping
// ErrInvalidConfig.
type Option func(*config) error

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// positive is an option that checks that d (what) is positive, then sets it.
func positive(what string, d time.Duration, set func(*config)) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalid("%s %v is not positive", what, d)
		}
		set(c)
		return nil
	}
}

// WithNamespace prefixes every Redis key with ns (default DefaultNamespace). The lock of
// entity E lives at ns+"{"+E+"}" and its fencing counter at the same key plus ":fence";
// the braces make both keys one Redis Cluster hash slot. ns must not be empty.
func WithNamespace(ns string) Option {
	return func(c *config) error {
		if ns == "" {
			return invalid("empty namespace")
		}
		c.namespace = ns
		return nil
	}
}

// WithTTL sets how long a lock stays valid without a refresh, bounding how long a crashed
// holder blocks others (default DefaultTTL). It must be positive.
func WithTTL(d time.Duration) Option {
	return positive("TTL", d, func(c *config) { c.ttl = d })
}

// WithRefreshEvery sets the period of the lease's watchdog, which extends the lock to a
// full TTL while the lease is held, so handlers may run longer than TTL (default
// TTL/DefaultRefreshDivisor). It must be positive and below TTL/2.
func WithRefreshEvery(d time.Duration) Option {
	return positive("refresh period", d, func(c *config) { c.refreshEvery, c.watchdog = d, true })
}

// WithoutWatchdog disables the watchdog: a lease is then lost TTL after it was obtained,
// however long its work runs.
func WithoutWatchdog() Option {
	return func(c *config) error { c.refreshEvery, c.watchdog = 0, false; return nil }
}

// WithRetryBackoff sets Acquire's backoff while another holder has the lock: exponential
// with full jitter, before retry n (from 0) a uniformly random wait in
// (0, min(maxDelay, minDelay·2ⁿ)] (defaults DefaultRetryBase and DefaultRetryMax).
// Randomising the whole interval spreads contending callers out instead of letting them
// retry in lock-step; WithMaxWait and the Acquire context bound the retries.
// 0 < minDelay <= maxDelay.
func WithRetryBackoff(minDelay, maxDelay time.Duration) Option {
	return func(c *config) error {
		if minDelay <= 0 || maxDelay < minDelay {
			return invalid("retry backoff %v..%v: want 0 < min <= max", minDelay, maxDelay)
		}
		c.retry, c.noRetry = backoff.Policy{Base: minDelay, Max: maxDelay}, false
		return nil
	}
}

// WithoutRetry makes Acquire and AcquireAll try exactly once.
func WithoutRetry() Option {
	return func(c *config) error { c.noRetry = true; return nil }
}

// WithMaxWait bounds how long one Acquire call keeps retrying, unless its context ends
// first (default: the TTL). It must be positive.
func WithMaxWait(d time.Duration) Option {
	return positive("max wait", d, func(c *config) { c.maxWait = d })
}

// WithFenceRetention sets how long an entity's fencing counter is kept in Redis after its
// last acquisition (default DefaultFenceRetention). Tokens stay monotonic after the
// counter expires (see Lease.Token), so this only bounds memory. It must be positive.
func WithFenceRetention(d time.Duration) Option {
	return positive("fence retention", d, func(c *config) { c.fenceRetention = d })
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
		if err := o(&c); err != nil {
			return c, err
		}
	}
	if c.watchdog {
		if c.refreshEvery == 0 {
			c.refreshEvery = c.ttl / DefaultRefreshDivisor
		}
		if c.refreshEvery >= c.ttl/2 {
			return c, fmt.Errorf("%w: refresh period %v is not below TTL/2 (%v)", ErrInvalidConfig, c.refreshEvery, c.ttl/2)
		}
	}
	if c.maxWait == 0 {
		c.maxWait = c.ttl
	}
	return c, nil
}
