// Package fence holds the fencing-token check that package lock runs with CheckFence and
// that the consumer sends in one round trip with the idempotency claim (see
// internal/txhook's Leading statements), so the statement is written once.
package fence

import (
	"errors"

	"github.com/jackc/pgx/v5"
)

// CheckSQL records $2 as the latest token of $1 and returns a row unless a higher token is
// already recorded (the caller's lease is stale). The upsert row-locks the entity's fence
// until the transaction ends.
const CheckSQL = `INSERT INTO choreo_lock_fences AS f (entity, token) VALUES ($1, $2)
ON CONFLICT (entity) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
WHERE f.token <= EXCLUDED.token
RETURNING f.token`

// Scan reads CheckSQL's result: stale is true when no row came back.
func Scan(row pgx.Row) (stale bool, err error) {
	var stored int64
	err = row.Scan(&stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	return false, err
}
