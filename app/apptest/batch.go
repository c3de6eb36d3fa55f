package apptest

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/txhook"
	"github.com/choreo-saga/choreo/migrate"
)

// Batch runs handlers in one transaction as the consumer's batch mode
// (consumer.StandardBatch) does: what they queue with consumer.AtCommit and
// consumer.AtCommitFunc goes out with the COMMIT, a consumer.TxValue is shared by all of
// them, and the effects they register with consumer.AfterCommit run after it. It claims
// no event ids (see Handle for that).
type Batch struct {
	// Wrap, if set, wraps the transaction the handlers get (to count their round trips,
	// say); the commit-time writes run on the wrapped one too.
	Wrap func(pgx.Tx) pgx.Tx
	// Before, if set, runs after the handlers and before the commit-time writes, so that a
	// test can slip a concurrent transaction in between.
	Before func(ctx context.Context, tx pgx.Tx)
}

// Run runs h for each of evs, in order, in one transaction on db, then b.Before, then the
// writes the handlers left for the commit, and commits. An error of any of them rolls
// everything back and is returned.
func (b Batch) Run(db migrate.Beginner, h consumer.TxHandler, evs ...event.Event) error {
	ctx := context.Background()
	var hooks *txhook.Hooks
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if b.Wrap != nil {
			tx = b.Wrap(tx)
		}
		hooks = txhook.New(tx)
		hctx := txhook.With(ctx, hooks)
		for _, ev := range evs {
			if err := h(hctx, tx, ev); err != nil {
				return err
			}
		}
		if b.Before != nil {
			b.Before(hctx, tx)
		}
		return hooks.Run(hctx)
	})
	if err == nil {
		hooks.Committed()
	}
	return err
}
