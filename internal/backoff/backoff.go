// Package backoff is the module's one implementation of capped exponential backoff with
// full jitter, shared by the consumer (Retry and the runtime's redelivery and outage
// waits), the outbox relay and the lock package.
//
// The bound before retry n (counting failed attempts from 1) is min(Max, Base·2ⁿ⁻¹), and
// the delay is drawn uniformly from (0, bound]: "full jitter" spreads callers that failed
// together over the whole interval instead of letting them retry in lock-step, and the
// delay is never zero, so a caller that loops on it never spins.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is a capped exponential backoff with full jitter. The zero value is usable: a
// Base below 1ns is taken as 1ns and a Max below Base as Base.
type Policy struct {
	// Base is the bound after the first failed attempt.
	Base time.Duration
	// Max caps the bound.
	Max time.Duration
	// Rand returns a uniform random integer in [0, n) for n > 0 (default
	// math/rand/v2.Int64N). Tests pass a seeded source.
	Rand func(n int64) int64
}

// Bound returns the upper bound of the delay after the given failed attempt (1-based;
// values below 1 count as 1): min(Max, Base·2^(attempt-1)).
func (p Policy) Bound(attempt int) time.Duration {
	base := max(p.Base, 1)
	ceil := max(p.Max, base)
	d := base
	for i := 1; i < attempt && d < ceil; i++ {
		d *= 2
		if d <= 0 { // overflow
			return ceil
		}
	}
	return min(d, ceil)
}

// Delay returns the delay after the given failed attempt: uniform in (0, Bound(attempt)].
func (p Policy) Delay(attempt int) time.Duration {
	r := p.Rand
	if r == nil {
		r = rand.Int64N
	}
	return time.Duration(r(int64(p.Bound(attempt)))) + 1
}

// Sleep waits for d. It returns true when d elapsed and false, at once, when ctx is done
// or stop (which may be nil) is closed first.
func Sleep(ctx context.Context, d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}
