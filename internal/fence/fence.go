// Package fence holds the fencing-token check, written once: package lock runs it with
// CheckFence (one entity), and the consumer sends it in one round trip with the
// idempotency claim (see internal/txhook's Leading statements) for the one lease of a
// record or every lease of a batch.
package fence

import (
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// ErrStale is lock.ErrStaleToken, defined here so that the check's errors are built in
// one place (package lock cannot be imported here).
var ErrStale = errors.New("lock: stale fencing token")

// CheckSQL records, for every i, $2[i] as the latest token of entity $1[i], in the order
// of the arrays, and returns one row: the entities whose token it recorded (NULL when
// none). An entity missing from it has a higher token recorded (the caller's lease of it
// is stale). The entities must be distinct. The upsert row-locks every entity's fence
// until the transaction ends; callers that pass the entities sorted take those locks in
// one global order, so transactions fencing overlapping sets wait for each other instead
// of deadlocking. Every entity is upserted even when one is stale: the caller rolls back.
//
// One entity is checked with CheckOneSQL instead (Check.Statement chooses): the
// one-element array statement cost the one-event-per-transaction path 0.13× of the
// hand-written floor in the hot-entity benchmark (docs/benchmarks.md).
const CheckSQL = `WITH up AS (
    INSERT INTO choreo_lock_fences AS f (entity, token)
    SELECT e, t FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS r (e, t, o) ORDER BY o
    ON CONFLICT (entity) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
    WHERE f.token <= EXCLUDED.token
    RETURNING f.entity
)
SELECT array_agg(entity) FROM up`

// CheckOneSQL is CheckSQL for one entity, $1 with token $2: the same upsert, returning
// the entity if it recorded the token and no row if the caller's lease is stale.
const CheckOneSQL = `INSERT INTO choreo_lock_fences AS f (entity, token) VALUES ($1, $2)
ON CONFLICT (entity) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
WHERE f.token <= EXCLUDED.token
RETURNING f.entity`

// Check is one fence check: Entities[i] (distinct, in the order their rows are to be
// locked) fenced with Tokens[i].
type Check struct {
	Entities []string
	Tokens   []int64
}

// Statement returns the check's statement and arguments: CheckOneSQL for one entity,
// else CheckSQL. Scan reads either.
func (c Check) Statement() (string, []any) {
	if len(c.Entities) == 1 {
		return CheckOneSQL, []any{c.Entities[0], c.Tokens[0]}
	}
	return CheckSQL, []any{c.Entities, c.Tokens}
}

// Scan reads the row of Statement's statement. A stale token is an error wrapping ErrStale that names the
// first stale entity and its token; a database error names the entity (or the first of
// several).
func (c Check) Scan(row pgx.Row) error {
	var (
		recorded []string
		err      error
	)
	if len(c.Entities) == 1 {
		var e string
		switch err = row.Scan(&e); {
		case errors.Is(err, pgx.ErrNoRows):
			err = nil // stale
		case err == nil:
			recorded = []string{e}
		}
	} else {
		err = row.Scan(&recorded)
	}
	if err != nil {
		if len(c.Entities) == 1 {
			return fmt.Errorf("lock: check fence %q: %w", c.Entities[0], err)
		}
		return fmt.Errorf("lock: check fences of %d entities from %q: %w", len(c.Entities), c.Entities[0], err)
	}
	if len(recorded) == len(c.Entities) {
		return nil
	}
	for i, e := range c.Entities {
		if !slices.Contains(recorded, e) {
			return fmt.Errorf("%w: %q token %d", ErrStale, e, c.Tokens[i])
		}
	}
	return fmt.Errorf("lock: check fences: %d of %d entities recorded", len(recorded), len(c.Entities))
}
