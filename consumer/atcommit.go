package consumer

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/internal/txhook"
)

// AtCommit queues writes to run in tx just before its COMMIT: queue adds statements to b
// (b.Queue(sql, args...)), and AtCommit sends them with the COMMIT of the transaction
// that Idempotent, Standard or StandardBatch runs, in one pgx batch, so that they cost
// no round trip of their own. Use it for writes whose outcome the handler does not need
// before it returns: a balance += amount, a row appended. The handler cannot read what
// they return, nor see their effect in tx: they have not run when AtCommit returns.
//
// In such a transaction (ctx and tx being the ones the handler was given) the statements
// run after every handler of the transaction returned, in the order they were queued:
// several AtCommit calls in one transaction, and in a StandardBatch transaction the calls
// of all its handlers, accumulate in call order. They run in one place relative to the
// outbox rows (outbox.Outbox.Enqueue) of the transaction: before them if the
// transaction's first AtCommit came before its first Enqueue, after them otherwise.
//
// If a statement fails, the COMMIT does not run: nothing of the transaction commits
// (idempotency record, writes, outbox rows) and the handling fails with the statement's
// error, wrapped with %w as every error below, which Retry classifies as it does any
// other. A statement may have a callback (QueuedQuery.Exec, Query, QueryRow or Fn),
// e.g. one that checks the command tag's row count and returns a sentinel error, wrapped
// in Permanent if a retry would repeat it. A callback runs when the statement's result
// is read, which in the COMMIT's round trip would be after the server committed; so when
// any statement of the transaction's AtCommit calls has a callback, their statements are
// sent in a round trip of their own just before the COMMIT's (still one for all of them,
// and with the outbox rows queued before them), and a callback's error rolls everything
// back and fails the handling, matching the callback's error with errors.Is and
// errors.As. To keep the round trip saved, queue statements without callbacks and put
// the check in SQL (a CHECK constraint, a WHERE clause and a function that raises).
//
// With any other tx or a ctx that does not carry the transaction's hooks (a transaction
// of the handler's own, pgx.BeginFunc, a test calling a handler directly), AtCommit sends
// the statements at once, in one round trip (tx.SendBatch), runs their callbacks and
// returns the first error: the same effect, visible to tx's next statements.
//
// A nil tx or queue is an error matching ErrInvalidConfig (Permanent: a bug that a retry
// would repeat). A queue that queues nothing sends nothing.
func AtCommit(ctx context.Context, tx pgx.Tx, queue func(b *pgx.Batch)) error {
	if tx == nil || queue == nil {
		return Permanent(fmt.Errorf("%w: AtCommit needs a transaction and a queue function", ErrInvalidConfig))
	}
	b := &pgx.Batch{}
	queue(b)
	if b.Len() == 0 {
		return nil
	}
	checked := wrapAtCommit(b)
	if hooks := txhook.For(ctx, tx); hooks != nil {
		q := hooks.Hook(atCommitKey{}, func() any { return &atCommitQueue{} }).(*atCommitQueue)
		q.queries = append(q.queries, b.QueuedQueries...)
		q.checked = q.checked || checked
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

// wrapAtCommit makes every statement of b report its failure, or its callback's, as
// AtCommit's, and reports whether any of them had a callback.
func wrapAtCommit(b *pgx.Batch) (callbacks bool) {
	for _, qq := range b.QueuedQueries {
		fn := qq.Fn
		if fn == nil {
			fn = func(br pgx.BatchResults) error {
				_, err := br.Exec()
				return err
			}
		} else {
			callbacks = true
		}
		qq.Fn = func(br pgx.BatchResults) error {
			if err := fn(br); err != nil {
				return fmt.Errorf("consumer: AtCommit: %w", err)
			}
			return nil
		}
	}
	return callbacks
}

type atCommitKey struct{}

// atCommitQueue holds a transaction's AtCommit statements (a txhook.Checker): queued into
// the batch that carries the COMMIT, or sent just before it when one has a callback.
type atCommitQueue struct {
	queries []*pgx.QueuedQuery
	checked bool
}

func (q *atCommitQueue) Queue(b *pgx.Batch) { b.QueuedQueries = append(b.QueuedQueries, q.queries...) }

func (q *atCommitQueue) Checked() bool { return q.checked }

var _ txhook.Checker = (*atCommitQueue)(nil)
