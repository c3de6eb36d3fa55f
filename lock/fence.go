package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/internal/fence"
	"github.com/choreo-saga/choreo/migrate"
)

// CheckFence records token as the latest fencing token of entity inside
// tx, the caller's transaction, and returns an error wrapping ErrStaleToken
// if a higher token has already been recorded. The same token may check
// any number of times.
//
// Call it first in the transaction, before reading the entity's rows: the
// upsert row-locks the entity's fence until the transaction ends, so
// transactions fenced on one entity are serialised, and a holder that was
// paused past its TTL finds the next holder's higher token and must roll
// back instead of committing a stale write.
//
// Under READ COMMITTED (the default) a concurrent newer token makes the
// check wait and then fail with ErrStaleToken; under REPEATABLE READ or
// SERIALIZABLE it fails with a serialization error instead.
func CheckFence(ctx context.Context, tx pgx.Tx, entity string, token int64) error {
	if entity == "" {
		return fmt.Errorf("%w: empty", ErrInvalidEntity)
	}
	c := fence.Check{Entities: []string{entity}, Tokens: []int64{token}}
	sql, args := c.Statement()
	return c.Scan(tx.QueryRow(ctx, sql, args...))
}

// CheckFence is CheckFence(ctx, tx, ls.Key(), ls.Token()), and first fails
// with the lease's error if the lease is already known to be lost. Keying
// the fence by the Redis key keeps Lockers with different namespaces apart.
func (ls *Lease) CheckFence(ctx context.Context, tx pgx.Tx) error {
	if err := ls.Err(); err != nil {
		return err
	}
	return CheckFence(ctx, tx, ls.key, ls.token)
}

// PruneFences deletes fencing rows not written for olderThan, at most
// batch rows per statement, until none is left; it returns how many it
// deleted. Pruning an entity's row removes its protection only against a
// holder that was paused for longer than olderThan (a newer holder writes a
// new row), so keep olderThan far above any plausible pause: days.
func PruneFences(ctx context.Context, db migrate.Execer, olderThan time.Duration, batch int) (int64, error) {
	if olderThan <= 0 || batch <= 0 {
		return 0, fmt.Errorf("lock: prune fences: olderThan %v and batch %d must be positive", olderThan, batch)
	}
	const sql = `DELETE FROM choreo_lock_fences AS f USING (
    SELECT entity FROM choreo_lock_fences
    WHERE updated_at < now() - $1::bigint * interval '1 microsecond'
    ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED
) AS x WHERE f.entity = x.entity`
	var total int64
	for {
		tag, err := db.Exec(ctx, sql, olderThan.Microseconds(), batch)
		if err != nil {
			return total, fmt.Errorf("lock: prune fences: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}
