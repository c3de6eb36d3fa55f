package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/choreo-saga/choreo/internal/backoff"
	"github.com/choreo-saga/choreo/lock"
)

// RetryConfig configures Retry. The zero value is usable: every zero field takes its
// default.
type RetryConfig struct {
	// MaxAttempts bounds the attempts, the first included; 0 or less sets no count limit,
	// so that MaxElapsed alone bounds the retries (default DefaultRetryMaxAttempts, 0).
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
}

func (p RetryConfig) withDefaults() RetryConfig {
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
	return p
}

// Retry runs the handlers it wraps again after a retryable error, sleeping a full-jitter
// exponential backoff between attempts (uniform in (0, min(MaxDelay, BaseDelay·2ⁿ⁻¹)]
// after attempt n), until they succeed, return a non-retryable error (returned as is), or
// the policy's attempts or elapsed time run out (the last error is returned wrapped in
// ErrRetriesExhausted). It keeps m.Attempt current.
//
// Lock contention that outlasts the budget (lock.ErrNotObtained, lock.ErrLost) is not
// the record's fault either: a lease can only be held that long by a holder that keeps
// it alive or by one that lost Redis in an outage and whose key has not expired yet. It
// is returned as an outage (matching ErrOutage), so the runtime waits it out instead of
// dead-lettering a good event.
//
// An outage (IsOutage) is not the record's fault: Retry returns it at once, without
// spending the budget, and the runtime retries the record without limit until the
// outage ends (see the package documentation). The sleep ends early when ctx is
// cancelled or the partition's worker stops; the record is then left unsettled, never
// dead-lettered.
func Retry(p RetryConfig) Middleware {
	p = p.withDefaults()
	bo := backoff.Policy{Base: p.BaseDelay, Max: p.MaxDelay}
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			start := time.Now()
			for attempt := 1; ; attempt++ {
				m.Attempt = attempt
				err := next(ctx, m)
				if err == nil || !p.Retryable(err) || abandoned(ctx, err) || IsOutage(err) {
					return err
				}
				delay := bo.Delay(attempt)
				if (p.MaxAttempts > 0 && attempt >= p.MaxAttempts) || time.Since(start)+delay > p.MaxElapsed {
					return exhausted(err, attempt, time.Since(start))
				}
				if p.OnRetry != nil {
					p.OnRetry(ctx, m, err, delay)
				}
				if !backoff.Sleep(ctx, delay, stopSignal(ctx)) {
					return fmt.Errorf("%w: %w", errStopping, err)
				}
			}
		}
	}
}

// exhausted is the error Retry returns when its budget ran out after attempt attempts.
func exhausted(err error, attempts int, elapsed time.Duration) error {
	if errors.Is(err, lock.ErrNotObtained) || errors.Is(err, lock.ErrLost) {
		return fmt.Errorf("%w: lock contention outlasted the retry budget (%d attempts in %v): %w",
			ErrOutage, attempts, elapsed.Round(time.Millisecond), err)
	}
	return fmt.Errorf("%w after %d attempts in %v: %w", ErrRetriesExhausted, attempts, elapsed.Round(time.Millisecond), err)
}
