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
