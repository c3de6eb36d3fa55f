package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/migrate"
)

// The hand-written pipeline's own tables: its dedup record and its outbox.
const handSchema = `
CREATE TABLE hw_dedup (event_id text PRIMARY KEY);
CREATE TABLE hw_outbox (
	id      bigserial PRIMARY KEY,
	topic   text NOT NULL,
	key     text NOT NULL,
	headers jsonb NOT NULL,
	payload bytea NOT NULL
);`

// setupSchema creates the accounts (balance 0), the library's tables and the
// hand-written pipeline's.
func setupSchema(ctx context.Context, pool *pgxpool.Pool, accounts int) error {
	if err := migrate.Up(ctx, pool); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, handSchema+`
CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
INSERT INTO accounts (id) SELECT 'acct-' || g FROM generate_series(1, `+strconv.Itoa(accounts)+`) g`)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `VACUUM ANALYZE accounts`)
	return err
}

// resetState empties every dedup, idempotency, fence and outbox table and sets every
// balance back to 0, so that each mode starts from the same state.
func resetState(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, `TRUNCATE hw_dedup, hw_outbox, choreo_idempotency, choreo_outbox, choreo_lock_fences`); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `UPDATE accounts SET balance = 0 WHERE balance <> 0`); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, `VACUUM ANALYZE accounts`)
	return err
}

// buildPrefilled makes choreo_idempotency_prefilled, a copy of the idempotency table
// holding n records of an earlier scope (random keys, as event ids from many producers
// are; created over the last 7 days and expiring over the next: inside the retention
// window, so a sweeper keeps them), its
// primary key and index built after the rows (as they would have grown, but faster),
// and analyzed as autovacuum would have. The choreo/prefilled mode swaps it in.
func buildPrefilled(ctx context.Context, pool *pgxpool.Pool, n int) error {
	for _, q := range []string{
		`DROP TABLE IF EXISTS choreo_idempotency_prefilled`,
		`CREATE TABLE choreo_idempotency_prefilled (LIKE choreo_idempotency INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`,
		fmt.Sprintf(`INSERT INTO choreo_idempotency_prefilled (scope, key, request_hash, created_at, expires_at)
			SELECT 'hot-earlier/hot', gen_random_uuid()::text, sha256(g::text::bytea), t - interval '7 days', t
			FROM generate_series(1, %d) g, LATERAL (SELECT now() + (g %% 604800) * interval '1 second') e(t)`, n),
		`ALTER TABLE choreo_idempotency_prefilled ADD PRIMARY KEY (scope, key)`,
		`CREATE INDEX ON choreo_idempotency_prefilled (expires_at)`,
		`VACUUM ANALYZE choreo_idempotency_prefilled`,
		`CHECKPOINT`, // the fill's writes are flushed before any mode is measured
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("prefill %d idempotency records: %w", n, err)
		}
	}
	return nil
}

// swapPrefilled puts the prefilled table in the idempotency table's place (renames are
// instant; statements prepared on the old one are re-analyzed by name).
func swapPrefilled(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `ALTER TABLE choreo_idempotency RENAME TO choreo_idempotency_empty;
		ALTER TABLE choreo_idempotency_prefilled RENAME TO choreo_idempotency`)
	return err
}

// unswapPrefilled puts the empty table back, and deletes the records the mode added
// under scope from the prefilled one (there must be some: the swap took).
func unswapPrefilled(ctx context.Context, pool *pgxpool.Pool, scope string) error {
	if _, err := pool.Exec(ctx, `ALTER TABLE choreo_idempotency RENAME TO choreo_idempotency_prefilled;
		ALTER TABLE choreo_idempotency_empty RENAME TO choreo_idempotency`); err != nil {
		return err
	}
	tag, err := pool.Exec(ctx, `DELETE FROM choreo_idempotency_prefilled WHERE scope = $1`, scope)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("no claim of scope %s went to the prefilled table", scope)
	}
	return err
}

// count is n for a table's name: "10M", "250k" or "1234".
func count(n int) string {
	switch {
	case n >= 1e6 && n%1e6 == 0:
		return fmt.Sprintf("%dM", n/1e6)
	case n >= 1e3 && n%1e3 == 0:
		return fmt.Sprintf("%dk", n/1e3)
	}
	return fmt.Sprint(n)
}

// check verifies a mode's result: every balance is the sum of its account's unique
// events, the output topic holds exactly one record per unique input event (caused by
// it), and nothing was dead-lettered (the consumer's .dlq topic and the outbox's dead
// table are empty).
func check(ctx context.Context, pool *pgxpool.Pool, brokers []string, in, out string, w workload) error {
	var errs []error
	rows, err := pool.Query(ctx, `SELECT id, balance FROM accounts`)
	if err != nil {
		return err
	}
	wrong := 0
	for rows.Next() {
		var id string
		var bal int64
		if err := rows.Scan(&id, &bal); err != nil {
			return err
		}
		if bal != w.balance[id] {
			if wrong++; wrong <= 3 {
				errs = append(errs, fmt.Errorf("account %s: balance %d, want %d", id, bal, w.balance[id]))
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if wrong > 3 {
		errs = append(errs, fmt.Errorf("… %d accounts with a wrong balance in all", wrong))
	}
	var dead int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM choreo_outbox_dead`).Scan(&dead); err != nil {
		return err
	}
	if dead > 0 {
		errs = append(errs, fmt.Errorf("%d outbox rows dead-lettered", dead))
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(out),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, out, consumer.DeadLetterTopic(in))
	if err != nil {
		return err
	}
	var total, dlq int64
	ends.Each(func(o kadm.ListedOffset) {
		switch o.Topic {
		case out:
			total += o.Offset
		default:
			dlq += o.Offset
		}
	})
	if dlq > 0 {
		errs = append(errs, fmt.Errorf("%d records dead-lettered to %s.dlq", dlq, in))
	}

	unique := make(map[string]bool, w.unique)
	for _, ev := range w.events {
		unique[ev.ID] = true
	}
	seen := make(map[string]int, w.unique)
	deadline, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for n := int64(0); n < total; {
		fs := cl.PollFetches(deadline)
		if err := deadline.Err(); err != nil {
			return fmt.Errorf("reading %s: %d of %d records: %w", out, n, total, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return fmt.Errorf("reading %s: %w", out, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			ev, err := event.FromRecord(r)
			if err != nil {
				errs = append(errs, fmt.Errorf("output offset %d/%d: %w", r.Partition, r.Offset, err))
				return
			}
			seen[ev.CausationID]++
		})
	}
	var missing, doubled, unknown []string
	for id := range unique {
		switch {
		case seen[id] == 0:
			missing = append(missing, id)
		case seen[id] > 1:
			doubled = append(doubled, id)
		}
	}
	for id := range seen {
		if !unique[id] {
			unknown = append(unknown, id)
		}
	}
	for _, c := range []struct {
		what string
		ids  []string
	}{
		{"input events with no output record", missing},
		{"input events with more than one output record", doubled},
		{"output records caused by no input event", unknown},
	} {
		if len(c.ids) > 0 {
			errs = append(errs, fmt.Errorf("%d %s (e.g. %q)", len(c.ids), c.what, c.ids[:min(3, len(c.ids))]))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("correctness check failed (%d output records for %d unique events): %w", total, w.unique, errors.Join(errs...))
	}
	return nil
}
