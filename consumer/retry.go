package consumer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Defaults of RetryPolicy.
const (
	DefaultRetryMaxAttempts = 5
	DefaultRetryBaseDelay   = 100 * time.Millisecond
	DefaultRetryMaxDelay    = 5 * time.Second
	DefaultRetryMaxElapsed  = time.Minute
)

// RetryPolicy configures Retry. The zero value is usable: every zero field takes its
// default.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts, the first included (default DefaultRetryMaxAttempts).
	MaxAttempts int
	// BaseDelay is the backoff bound before the second attempt; it doubles per attempt
	// (default DefaultRetryBaseDelay).
	BaseDelay time.Duration
	// MaxDelay caps the backoff bound (default DefaultRetryMaxDelay).
	MaxDelay time.Duration
	// MaxElapsed bounds the total time from the first attempt: no attempt starts after it
	// (default DefaultRetryMaxElapsed).
	MaxElapsed time.Duration
	// Retryable classifies errors (default Retryable).
	Retryable func(error) bool
	// OnRetry, if set, is called before each backoff sleep with the attempt that failed
	// and the delay chosen.
	OnRetry func(ctx context.Context, m *Message, err error, delay time.Duration)
	// Jitter returns a uniform random integer in [0, n) (default math/rand/v2.Int64N).
	Jitter func(n int64) int64
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultRetryMaxAttempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = DefaultRetryBaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultRetryMaxDelay
	}
	if p.MaxDelay < p.BaseDelay {
		p.MaxDelay = p.BaseDelay
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = DefaultRetryMaxElapsed
	}
	if p.Retryable == nil {
		p.Retryable = Retryable
	}
	if p.Jitter == nil {
		p.Jitter = rand.Int64N
	}
	return p
}

// Bound returns the upper bound of the backoff after the given failed attempt (1-based):
// min(MaxDelay, BaseDelay * 2^(attempt-1)).
func (p RetryPolicy) Bound(attempt int) time.Duration {
	p = p.withDefaults()
	d := p.BaseDelay
	for i := 1; i < attempt && d < p.MaxDelay; i++ {
		d *= 2
	}
	return min(d, p.MaxDelay)
}

// Backoff returns the delay after the given failed attempt with full jitter: a uniform
// random duration in [0, Bound(attempt)].
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	p = p.withDefaults()
	return time.Duration(p.Jitter(int64(p.Bound(attempt)) + 1))
}

// Retry runs the handlers it wraps again after a retryable error, sleeping a full-jitter
// exponential backoff between attempts, until they succeed, return a non-retryable error
// (returned as is), or the policy's attempts or elapsed time run out (the last error is
// returned wrapped in ErrRetriesExhausted). It keeps m.Attempt current. The sleep ends
// early when ctx is cancelled or the partition's worker stops; the record is then left
// unsettled, never dead-lettered.
func Retry(p RetryPolicy) Middleware {
	p = p.withDefaults()
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			start := time.Now()
			for attempt := 1; ; attempt++ {
				m.Attempt = attempt
				err := next(ctx, m)
				if err == nil || !p.Retryable(err) || abandoned(ctx, err) {
					return err
				}
				if attempt >= p.MaxAttempts {
					return fmt.Errorf("%w after %d attempts: %w", ErrRetriesExhausted, attempt, err)
				}
				delay := p.Backoff(attempt)
				if time.Since(start)+delay > p.MaxElapsed {
					return fmt.Errorf("%w after %d attempts in %v: %w", ErrRetriesExhausted, attempt,
						time.Since(start).Round(time.Millisecond), err)
				}
				if p.OnRetry != nil {
					p.OnRetry(ctx, m, err, delay)
				}
				t := time.NewTimer(delay)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return fmt.Errorf("%w: %w", errStopping, err)
				case <-stopSignal(ctx):
					t.Stop()
					return fmt.Errorf("%w: %w", errStopping, err)
				}
			}
		}
	}
}
