package tracker

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// batchAttempts bounds how often sendBatch sends a batch that Postgres aborted to break a
// deadlock.
const batchAttempts = 5

// sendBatch builds a batch with queue and sends it (one implicit transaction). Tracker
// instances writing the same tallies, summaries or producers can deadlock; Postgres then
// aborts one batch, which sendBatch builds and sends again: every write in it is a
// recomputation, so sending it again is safe.
func (t *Tracker) sendBatch(ctx context.Context, what string, queue func(*pgx.Batch) error) error {
	for attempt := 1; ; attempt++ {
		var b pgx.Batch
		if err := queue(&b); err != nil {
			return err
		}
		if b.Len() == 0 {
			return nil
		}
		err := t.db.SendBatch(ctx, &b).Close()
		if err == nil {
			return nil
		}
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != deadlockDetected || attempt == batchAttempts {
			return fmt.Errorf("tracker: %s: %w", what, err)
		}
		t.log.Info("tracker: batch aborted to break a deadlock, sending it again", "batch", what, "attempt", attempt)
	}
}

// deadlockDetected is Postgres' SQLSTATE for a transaction aborted to break a deadlock.
const deadlockDetected = "40P01"
