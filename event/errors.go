package event

import (
	"errors"
	"fmt"
)

// ErrMalformed matches every error this package returns for bad input: a record or event
// that can never be handled, however often it is retried. Consumers send such events to the
// dead-letter topic at once.
var ErrMalformed = errors.New("event: malformed")

// ErrInvalidConfig is wrapped by NewDecoder's error for an invalid DecodeOption.
var ErrInvalidConfig = errors.New("event: invalid configuration")

// Finer kinds of malformed input. Each error matching one of them also matches ErrMalformed.
var (
	// ErrMissingHeader: a required CloudEvents attribute is absent or empty.
	ErrMissingHeader = errors.New("event: missing header")
	// ErrInvalidHeader: an attribute is present but unparsable or out of bounds.
	ErrInvalidHeader = errors.New("event: invalid header")
	// ErrUnsupportedSpecVersion: ce_specversion is not "1.0".
	ErrUnsupportedSpecVersion = errors.New("event: unsupported CloudEvents spec version")
	// ErrPayloadTooLarge: the record value exceeds the decoder's payload limit.
	ErrPayloadTooLarge = errors.New("event: payload too large")
	// ErrInvalidPayload: the payload is not valid JSON, or does not fit the target type.
	ErrInvalidPayload = errors.New("event: invalid payload")
)

// Error describes one piece of malformed input. It matches ErrMalformed and its Kind with
// errors.Is.
type Error struct {
	// Field is the envelope attribute at fault, e.g. "id" or "data".
	Field string
	// Kind is one of the sentinel errors above.
	Kind error
	// Detail says what was wrong, for humans and dead-letter headers.
	Detail string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%v: %s: %s", e.Kind, e.Field, e.Detail)
}

// Unwrap lets errors.Is match both ErrMalformed and the error's Kind.
func (e *Error) Unwrap() []error { return []error{ErrMalformed, e.Kind} }
