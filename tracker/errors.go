package tracker

import "errors"

// Sentinel errors of the tracker; returned wrapped with %w.
var (
	// ErrInvalidConfig is returned by New and LoadConfig for a saga declaration or an
	// option that cannot work: a saga without a name or start types, a malformed glob,
	// a non-positive expectation window, an invalid table name.
	ErrInvalidConfig = errors.New("tracker: invalid config")
	// ErrNotFound is returned by Saga for a correlation id with no indexed event.
	ErrNotFound = errors.New("tracker: saga not found")
)
