package consumer

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/internal/txhook"
)

// AfterCommit arranges for fn to run once tx has committed: the place for a handler's
// effects outside the database that must count what happened, not what was attempted —
// a metric of money moved, a log line saying "authorized" or a state changed. A
// transaction that rolls back, or whose COMMIT fails (a lost connection, a deferred
// constraint, a serialization failure), runs none of them; its retry registers them
// again, so an effect is counted once per commit.
//
// In the transactions that Idempotent, Standard and StandardBatch run, and in
// outbox.Outbox.InTx (ctx and tx being the ones the handler or fn was given), the
// functions run after the COMMIT succeeded and before the record's offset is marked, in
// the order they were registered, on the handler's goroutine; in a StandardBatch
// transaction, those of every handler of the batch. They must not block: the partition
// waits for them.
//
// With any other tx or a ctx that does not carry the transaction's hooks (a transaction
// of the caller's own, a test calling a handler directly), nothing can tell when tx
// commits, and fn runs at once. A nil fn does nothing.
func AfterCommit(ctx context.Context, tx pgx.Tx, fn func()) {
	if fn == nil {
		return
	}
	if hooks := txhook.For(ctx, tx); hooks != nil {
		hooks.After(fn)
		return
	}
	fn()
}
