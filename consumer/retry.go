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
	// Probes confirm an outage before it may hold a record without limit (default none:
	// every outage is waited out; Standard adds its DB's Ping). See Retry.
	Probes Probes
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
	p.Probes = p.Probes.withDefaults()
	return p
}

// retryInPlace runs the handlers it wraps again after a retryable error, sleeping a full-jitter
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
// An outage (IsOutage) is not the record's fault: retryInPlace returns it at once, without
// spending the budget, and the runtime retries the record without limit until the
// outage ends (see the package documentation). The sleep ends early when ctx is
// cancelled or the partition's worker stops; the record is then left unsettled, never
// dead-lettered.
//
// With Probes, an outage is confirmed first when it is one a single record can cause:
// a timeout (pgconn.Timeout, a net.Error timeout, a context deadline inside the
// handler), a deadlock or a serialization failure. retryInPlace probes the dependency the error
// came from (Postgres for Postgres errors, every probe for a timeout of unknown origin),
// each probe bounded by Probes.Timeout. If a probe fails, the outage is real and is
// returned as above. If they all answer, the failure counts as the record's: it spends
// the budget like any retryable error, and once the budget is spent and the record has
// failed so at least Probes.Confirmations times in a row, retryInPlace returns
// ErrRetriesExhausted with the last error, which DeadLetter dead-letters with reason
// retries_exhausted. Connection failures, server shutdowns, missing tables, Redis
// cluster states and errors wrapping ErrOutage are never refuted.
func retryInPlace(p RetryConfig) Middleware {
	p = p.withDefaults()
	bo := backoff.Policy{Base: p.BaseDelay, Max: p.MaxDelay}
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			start := time.Now()
			refuted := 0 // outage-class failures in a row whose probes answered
			for attempt := 1; ; attempt++ {
				m.Attempt = attempt
				err := next(ctx, m)
				if err == nil || !p.Retryable(err) || abandoned(ctx, err) {
					return err
				}
				if IsOutage(err) {
					if !p.Probes.any() || !p.Probes.answers(ctx, err) {
						return err
					}
					refuted++
					err = &refutedError{err: err}
				} else {
					refuted = 0
				}
				delay := bo.Delay(attempt)
				spent := (p.MaxAttempts > 0 && attempt >= p.MaxAttempts) || time.Since(start)+delay > p.MaxElapsed
				if spent && (refuted == 0 || refuted >= p.Probes.Confirmations) {
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
