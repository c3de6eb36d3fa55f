package outbox

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidConfig is returned (wrapped) by New and NewRelay for an option
	// value that cannot work, and by NewRelay for a nil pool or outbox.
	ErrInvalidConfig = errors.New("outbox: invalid configuration")

	// ErrInvalidTable is returned for a table name that is not a lower-case,
	// optionally schema-qualified SQL identifier. It wraps ErrInvalidConfig.
	ErrInvalidTable = fmt.Errorf("%w: table name", ErrInvalidConfig)

	// ErrInvalidHeader is returned by Enqueue when a record header value is not
	// valid UTF-8 or holds a NUL byte (headers are stored as jsonb, which refuses
	// both).
	ErrInvalidHeader = errors.New("outbox: header value is not UTF-8 text")

	// ErrUnsafeClient is returned by Relay.Run when the Kafka client is not an
	// idempotent producer with acks=all: such a client may lose, duplicate or
	// reorder records behind the relay's back.
	ErrUnsafeClient = errors.New("outbox: kafka client must be an idempotent producer with acks=all")

	// ErrRunning is returned by Relay.Run when the same Relay is already running.
	ErrRunning = errors.New("outbox: relay already running")

	// ErrHook wraps the error returned by an AfterAck hook. Run stops with it:
	// the rows of that batch stay in the table and are republished by the next
	// leader.
	ErrHook = errors.New("outbox: after-ack hook failed")
)
