package idempotency

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/migrate"
)

// ClaimAll's lookup of the keys its INSERT did not take is planned as one primary-key
// probe per key in its generic plan, the one Postgres switches to after five executions
// of a prepared statement, whatever the table's statistics say: it never scans the
// scope's rows (Seq Scan, or Bitmap Heap Scan on the scope's index range).
func TestClaimAllGenericPlanProbesThePrimaryKey(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	if err := migrate.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	s, err := NewStore()
	if err != nil {
		t.Fatal(err)
	}
	table := s.table.Quoted()
	fill := func(from, to int) {
		t.Helper()
		_, err := pool.Exec(ctx, `INSERT INTO `+table+` (scope, key, request_hash, expires_at)
			SELECT 'g/h', 'k' || i, '\x00', now() + interval '1 day' FROM generate_series($1::int, $2::int) AS i`, from, to)
		if err != nil {
			t.Fatal(err)
		}
	}
	analyze := func() {
		t.Helper()
		if _, err := pool.Exec(ctx, `ANALYZE `+table); err != nil {
			t.Fatal(err)
		}
	}
	explain := func(t *testing.T) string {
		t.Helper()
		var plan strings.Builder
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `PREPARE lookup_all (text, text[]) AS `+s.lookupAllSQL); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `EXPLAIN EXECUTE lookup_all ('g/h', '{k1,k2,new}')`)
			if err != nil {
				return err
			}
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					return err
				}
				plan.WriteString(line + "\n")
			}
			if err := rows.Err(); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `DEALLOCATE lookup_all`)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return plan.String()
	}
	check := func(t *testing.T) {
		plan := explain(t)
		for _, bad := range []string{"Seq Scan on choreo_idempotency", "Bitmap Heap Scan on choreo_idempotency"} {
			if strings.Contains(plan, bad) {
				t.Errorf("generic plan scans the table (%s):\n%s", bad, plan)
			}
		}
		if !strings.Contains(plan, "Index Scan using choreo_idempotency_pkey") {
			t.Errorf("generic plan has no primary-key probe:\n%s", plan)
		}
	}

	// Statistics taken on the empty table, as in a fresh deployment that then fills up.
	analyze()
	fill(1, 20000)
	t.Run("stale statistics", check)
	// Statistics that know the table: one scope, many keys.
	analyze()
	t.Run("fresh statistics", check)
}
