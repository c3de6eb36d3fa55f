package consumer

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/internal/txhook"
)

// TxValue returns the value that the handlers of tx's transaction share under key: the
// one newValue returned at the transaction's first TxValue call with that key. In a
// StandardBatch transaction every handler of the batch gets the same value, so they can
// accumulate changes (a balance's delta per customer) that one AtCommitFunc writes with
// the COMMIT. key is compared with ==; use a value of an unexported type of your own.
//
// ok is false, and nothing is stored, when ctx and tx are not the ones Idempotent,
// Standard or StandardBatch gave the handler (a transaction of the handler's own, a test
// calling a handler directly): the handler then writes at once.
func TxValue(ctx context.Context, tx pgx.Tx, key any, newValue func() any) (v any, ok bool) {
	hooks := txhook.For(ctx, tx)
	if hooks == nil || key == nil || newValue == nil {
		return nil, false
	}
	return hooks.Hook(txValueKey{key}, newValue), true
}

// AtCommitFunc is AtCommit with queue called when the COMMIT is sent, after every handler
// of the transaction returned, rather than at once: queue can add statements for what the
// handlers accumulated in a TxValue. The transaction's first call under key counts; later
// calls with the same key add nothing. The statements go out with the COMMIT, in the
// order of the transaction's AtCommit and AtCommitFunc calls and relative to the outbox
// rows as AtCommit's do. A failed statement rolls everything back and fails the handling;
// a callback (QueuedQuery.Fn) may turn a statement's error into one of your own, but must
// not fail on a successful result: it is read after the server committed, so put such
// checks in SQL (a function that raises).
//
// Outside such a transaction (see TxValue) queue runs at once and its statements are sent
// in tx, as AtCommit sends them. A nil tx, key or queue is an error matching
// ErrInvalidConfig (Permanent).
func AtCommitFunc(ctx context.Context, tx pgx.Tx, key any, queue func(b *pgx.Batch)) error {
	if tx == nil || key == nil || queue == nil {
		return Permanent(fmt.Errorf("%w: AtCommitFunc needs a transaction, a key and a queue function", ErrInvalidConfig))
	}
	hooks := txhook.For(ctx, tx)
	if hooks == nil {
		return AtCommit(ctx, tx, queue)
	}
	hooks.Hook(atCommitFuncKey{key}, func() any { return atCommitFunc(queue) })
	return nil
}

type (
	txValueKey      struct{ key any }
	atCommitFuncKey struct{ key any }
)

// atCommitFunc is a txhook.Queuer: it queues its statements into the COMMIT's batch.
type atCommitFunc func(b *pgx.Batch)

func (f atCommitFunc) Queue(b *pgx.Batch) {
	own := &pgx.Batch{}
	f(own)
	wrapAtCommit(own)
	b.QueuedQueries = append(b.QueuedQueries, own.QueuedQueries...)
}

var _ txhook.Queuer = atCommitFunc(nil)
