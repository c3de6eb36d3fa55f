package app

import (
	"fmt"
	"maps"
	"slices"

	"github.com/choreo-saga/choreo/consumer"
)

// WithUpcaster registers fn to bring the payload of eventType from schema version from
// to version to in the consumer group of [On] (consumer.WithUpcaster): an event
// of another version than its handler declares is upcast, through a chain of
// upcasters, before the lock and the transaction (consumer.Standard's upcast step), on the one-record
// path, in batch mode and when a dead letter is replayed. The signature is verified
// and the idempotency claim hashed on the event as received. The handler of a type
// declares the versions registered with [On] for it: with handlers of v1 and v2 and an
// upcaster 1 → 2, a v1 event is handled at v1. A version with no path to one of them
// is dead-lettered ("unsupported_version"), as is one an upcaster refuses
// ("upcast_failed"). New refuses an invalid registration with an
// error matching ErrInvalidConfig. See docs/contracts.md. Default: none.
func WithUpcaster(eventType string, from, to int, fn consumer.Upcaster) Option {
	return func(o *options) error {
		ups := append(o.upcasters[:len(o.upcasters):len(o.upcasters)], consumer.WithUpcaster(eventType, from, to, fn))
		if _, err := consumer.NewUpcasters(ups...); err != nil { // with the earlier ones: a second path is an error too
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		o.upcasters = ups
		return nil
	}
}

// kitUpcasters returns the upcasters of the kit's consumer group, or nil without any.
// Every type registered with On declares the versions registered for it
// (consumer.WithDeclaredVersions), so an event is upcast only to a version the service
// has a handler of, and left as it is at one it has.
func (a *App) kitUpcasters() (*consumer.Upcasters, error) {
	if len(a.opts.upcasters) == 0 {
		return nil, nil
	}
	opts := slices.Clone(a.opts.upcasters)
	for _, typ := range slices.Sorted(maps.Keys(a.kit.versions)) {
		opts = append(opts, consumer.WithDeclaredVersions(typ, slices.Sorted(maps.Keys(a.kit.versions[typ]))...))
	}
	return consumer.NewUpcasters(opts...)
}
