package consumer

import (
	"errors"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
)

// Sentinel errors. Each is matched with errors.Is.
var (
	// ErrUnknownType: no handler is registered for the event's type and the type is not
	// ignored. Non-retryable: the event goes to the dead-letter topic.
	ErrUnknownType = errors.New("consumer: unknown event type")
	// ErrUntrusted: the event's type is declared with Router.Trust and its source or topic
	// matches none of the declared ones. Non-retryable: the event goes to the dead-letter
	// topic (reason "untrusted") and is never applied.
	ErrUntrusted = errors.New("consumer: untrusted event source or topic")
	// ErrBadSignature: the event's source is declared with Router.TrustKeys (or
	// VerifySignatures) and the record carries no valid signature by one of its keys.
	// It also matches event.ErrBadSignature. Non-retryable: the event goes to the
	// dead-letter topic (reason "bad_signature") and is never applied.
	ErrBadSignature = errors.New("consumer: bad signature")
	// ErrUpcast: an upcaster (Upcast) failed to bring the event's payload to a later
	// schema version. Non-retryable: an upcaster is a pure function, so the event goes to
	// the dead-letter topic (reason "upcast_failed").
	ErrUpcast = errors.New("consumer: upcast failed")
	// ErrUnsupportedVersion: the event's schema version is not one its handler declares
	// and no chain of upcasters leads from it to one (Upcast). Non-retryable: the event
	// goes to the dead-letter topic (reason "unsupported_version").
	ErrUnsupportedVersion = errors.New("consumer: unsupported schema version")
	// ErrPanic: a handler panicked. The error carries the panic value and stack.
	// Non-retryable: a panic is a bug that a retry would repeat.
	ErrPanic = errors.New("consumer: handler panicked")
	// ErrRetriesExhausted: Retry gave up on a retryable error (attempts or time).
	ErrRetriesExhausted = errors.New("consumer: retries exhausted")
	// ErrDeadLetter: producing a record to the dead-letter topic failed. The record is not
	// settled; the runtime retries it.
	ErrDeadLetter = errors.New("consumer: dead-letter produce failed")
	// ErrInvalidConfig: New, Standard or StandardBatch was given an unusable configuration,
	// or AtCommit a nil transaction or queue function.
	ErrInvalidConfig = errors.New("consumer: invalid configuration")
	// ErrRunning: Run was called twice, or on a consumer that was already shut down.
	ErrRunning = errors.New("consumer: already running or stopped")
	// ErrOutage: a dependency of the handler chain is unavailable (see IsOutage). A
	// handler may wrap it to declare a failure of its own dependency an outage; the
	// error of Consumer.Health wraps it while a partition is in an outage.
	ErrOutage = errors.New("consumer: outage")
	// ErrMissingTopic: a topic the consumer needs does not exist; the error names it.
	ErrMissingTopic = errors.New("consumer: missing topic")
	// ErrBatchTooLarge: a compressed batch decompresses past the client's bound (see
	// WithMaxRecordBytes), so its records were never decompressed whole. Non-retryable:
	// the batch is dead-lettered (reason "too_large") as one record without key, value
	// or headers, and the partition moves on past it.
	ErrBatchTooLarge = errors.New("consumer: batch decompresses past the bound")
)

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as non-retryable: Retry returns it at once and DeadLetter sends the
// record to the dead-letter topic. Permanent(nil) is nil. The result still matches err
// with errors.Is and errors.As.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// Retryable is the default classification used by Retry. An error is non-retryable when
// it was marked with Permanent or Reject or matches event.ErrMalformed, idempotency.ErrKeyReused,
// idempotency.ErrInvalidKey, ErrUnknownType, ErrUntrusted, ErrBadSignature, ErrUpcast,
// ErrUnsupportedVersion or ErrPanic; every other error, including
// lock.ErrNotObtained and lock.ErrLost, is retryable. (Retry stops on its own when its
// context is cancelled, whatever the classification.)
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var (
		p *permanentError
		r *rejectError
	)
	switch {
	case errors.As(err, &p), errors.As(err, &r),
		errors.Is(err, event.ErrMalformed),
		errors.Is(err, idempotency.ErrKeyReused),
		errors.Is(err, idempotency.ErrInvalidKey),
		errors.Is(err, ErrUnknownType),
		errors.Is(err, ErrUntrusted),
		errors.Is(err, ErrBadSignature),
		errors.Is(err, ErrUpcast),
		errors.Is(err, ErrUnsupportedVersion),
		errors.Is(err, ErrPanic):
		return false
	}
	return true
}
