package outbox

import "context"

// A WakeChannel carries [Outbox.Wake] calls from the writers of one process to the relay
// leading in another, in place of a Postgres NOTIFY ([WithNotifier]). Each NOTIFY is a
// Postgres transaction, with a transaction id and a commit record, and Postgres
// serialises the commits that carry one on a global lock; a message on a channel that
// does not go through the database costs it nothing. The package rediswake is a
// WakeChannel on Redis pub/sub. Implementations must be safe for concurrent use.
type WakeChannel interface {
	// Publish sends one wake-up on the channel called name (the outbox table's name).
	// An error is dropped by the caller: the relay's poll finds the rows anyway.
	Publish(ctx context.Context, name string) error
	// Subscribe calls wake for every wake-up published on name, and once each time the
	// subscription is established or re-established (for anything published while
	// nobody listened), until ctx ends or the subscription fails. It returns the
	// failure, or ctx's error once ctx ends. Calls of wake come from one goroutine and
	// must not block.
	Subscribe(ctx context.Context, name string, wake func()) error
}

// WithWakeChannel sets the channel Wake uses, when no relay of this Outbox leads in this
// process, to wake the leader in another one, and the channel a relay of this Outbox
// ([NewRelay]) subscribes to while it leads (besides its LISTEN). Publishes are
// coalesced as NOTIFYs are (see [WithNotifier] and [NotifySpacing]); when both are set,
// the wake channel carries every wake-up and no NOTIFY is sent. Every process of one
// outbox table must use the same channel: a leader that does not subscribe to it learns
// of the others' rows only at its poll ([WithPollInterval]). Default: none.
func WithWakeChannel(wc WakeChannel) Option {
	return func(o *Outbox) { o.wakeChannel = wc }
}
