package lock

import (
	"time"

	"github.com/bsm/redislock"

	"github.com/choreo-saga/choreo/internal/backoff"
)

// RetryStrategy decides how long Acquire waits before the next attempt; a
// backoff below 1ns stops retrying. It is redislock's interface, so
// redislock.LinearBackoff, redislock.ExponentialBackoff and
// redislock.LimitRetry can be used as they are.
type RetryStrategy = redislock.RetryStrategy

// RetryPolicy returns a fresh RetryStrategy for one Acquire call. Strategies
// count attempts, so each Acquire needs its own.
type RetryPolicy func() RetryStrategy

// FullJitter is exponential backoff with full jitter: before retry n
// (counting from 0) Acquire waits a uniformly random duration in
// (0, min(max, base·2ⁿ)]. Randomising the whole interval spreads contending
// callers out instead of letting them retry in lock-step. The wait is also
// bounded by Options.MaxWait and the Acquire context, which end the retries.
func FullJitter(base, max time.Duration) RetryPolicy {
	if base <= 0 {
		base = time.Millisecond
	}
	if max < base {
		max = base
	}
	p := backoff.Policy{Base: base, Max: max}
	return func() RetryStrategy { return &fullJitter{policy: p} }
}

// NoRetry makes Acquire try exactly once.
func NoRetry() RetryPolicy {
	return func() RetryStrategy { return redislock.NoRetry() }
}

type fullJitter struct {
	policy  backoff.Policy
	retries int
}

// NextBackoff implements RetryStrategy. It is not safe for concurrent use;
// RetryPolicy gives every Acquire its own.
func (f *fullJitter) NextBackoff() time.Duration {
	f.retries++
	return f.policy.Delay(f.retries)
}
