package consumer

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
)

// killFirstCommit creates table done whose first COMMIT with a new row loses its
// connection: a deferred constraint trigger terminates the committing backend (a
// sequence, which a rollback does not undo, tells the first time from the others).
func killFirstCommit(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `CREATE TABLE done (id text PRIMARY KEY);
CREATE SEQUENCE done_commits;
CREATE FUNCTION done_kill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF nextval('done_commits') = 1 THEN
		PERFORM pg_terminate_backend(pg_backend_pid());
		PERFORM pg_sleep(5); -- the termination interrupts it
	END IF;
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER done_kill AFTER INSERT ON done DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW EXECUTE FUNCTION done_kill();`); err != nil {
		t.Fatal(err)
	}
}

// An effect registered with AfterCommit runs once per commit: not for a transaction whose
// COMMIT lost its connection, not for one the handler failed, once for the retry that
// committed, and not again for a duplicate.
func TestAfterCommitRunsOnlyAfterCommit(t *testing.T) {
	pool := newDB(t)
	killFirstCommit(t, pool)
	ctx := context.Background()
	effects := 0
	fail := errors.New("handler failed")
	failing := true
	h := idempotent(t, IdempotentConfig{DB: pool, Name: "effects"}, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if _, err := tx.Exec(ctx, `INSERT INTO done VALUES ($1)`, ev.ID); err != nil {
			return err
		}
		AfterCommit(ctx, tx, func() { effects++ })
		if failing {
			return fail
		}
		return nil
	})
	m := decoded(t, "k", 1)

	if err := h(ctx, m); !errors.Is(err, fail) || effects != 0 {
		t.Fatalf("failed handler: err %v, effects %d; want %v, 0", err, effects, fail)
	}
	failing = false
	if err := h(ctx, m); err == nil || effects != 0 {
		t.Fatalf("killed commit: err %v, effects %d; want an error, 0", err, effects)
	}
	if n := count(t, pool, `SELECT count(*) FROM done`); n != 0 {
		t.Fatalf("killed commit left %d rows", n)
	}
	if err := h(ctx, m); err != nil || effects != 1 {
		t.Fatalf("retry: err %v, effects %d; want nil, 1", err, effects)
	}
	again := &Message{Group: "g", Event: m.Event, Decoded: true}
	if err := h(ctx, again); err != nil || again.Outcome != OutcomeDuplicate || effects != 1 {
		t.Fatalf("duplicate: err %v, outcome %q, effects %d; want nil, duplicate, 1", err, again.Outcome, effects)
	}

	// outbox.Outbox.InTx runs them after its commit too; a transaction of the caller's
	// own (no hooks) runs them at once.
	ob := migratedOutbox(t, pool)
	err := ob.InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		AfterCommit(ctx, tx, func() { effects++ })
		if effects != 1 {
			t.Errorf("InTx: effect ran before the commit")
		}
		return nil
	})
	if err != nil || effects != 2 {
		t.Fatalf("InTx: err %v, effects %d; want nil, 2", err, effects)
	}
	_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		AfterCommit(ctx, tx, func() { effects++ })
		return nil
	})
	if effects != 3 {
		t.Fatalf("own transaction: effects %d, want 3", effects)
	}
}

// A Reject commits the handler's writes and its effects, and is then returned with its
// own dead-letter reason, not retryable; a redelivery is refused again, handled once.
func TestRejectCommitsAndRefuses(t *testing.T) {
	pool := newDB(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE done (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	effects := 0
	mismatch := errors.New("amount differs")
	h := idempotent(t, IdempotentConfig{DB: pool, Name: "reject"}, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if _, err := tx.Exec(ctx, `INSERT INTO done VALUES ($1)`, ev.ID); err != nil {
			return err
		}
		AfterCommit(ctx, tx, func() { effects++ })
		return Reject("mismatch", mismatch)
	})
	m := decoded(t, "k", 1)
	err := h(ctx, m)
	if !errors.Is(err, mismatch) || Retryable(err) || Reason(err) != "mismatch" {
		t.Fatalf("err %v (retryable %v, reason %q); want %v, not retryable, reason mismatch", err, Retryable(err), Reason(err), mismatch)
	}
	if n := count(t, pool, `SELECT count(*) FROM done`); n != 1 || effects != 1 {
		t.Fatalf("rows %d, effects %d; want 1, 1 (the refusal's writes commit)", n, effects)
	}
	// A redelivery (say the dead-letter copy failed) is refused again without the
	// handler: nothing is written or counted twice.
	again := &Message{Group: "g", Event: m.Event, Decoded: true}
	err = h(ctx, again)
	if Reason(err) != "mismatch" || Retryable(err) || !strings.Contains(err.Error(), mismatch.Error()) {
		t.Fatalf("redelivery: err %v (reason %q); want the refusal again", err, Reason(err))
	}
	if n := count(t, pool, `SELECT count(*) FROM done`); n != 1 || effects != 1 {
		t.Fatalf("redelivery: rows %d, effects %d; want 1, 1", n, effects)
	}
	if Reject("", mismatch) == nil || Reason(Reject("", mismatch)) != ReasonPermanent || Reject("x", nil) != nil {
		t.Fatal("Reject defaults")
	}
}

// In a batch transaction a Reject rolls the batch back (its records are then handled
// one at a time), and a batch holding a record refused before fails the same way.
func TestRejectInBatch(t *testing.T) {
	pool := newDB(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE done (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	refuse := errors.New("refused")
	tr, err := IdempotentConfig{DB: pool, Name: "batch"}.resolve(func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if _, err := tx.Exec(ctx, `INSERT INTO done VALUES ($1)`, ev.ID); err != nil {
			return err
		}
		if ev.Subject == "bad" {
			return Reject("mismatch", refuse)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	good, bad := decoded(t, "good", 1), decoded(t, "bad", 1)
	good.Record, bad.Record = &kgo.Record{Offset: 1}, &kgo.Record{Offset: 2}
	if err := tr.run(ctx, []*Message{good, bad}, nil, nil); err == nil || count(t, pool, `SELECT count(*) FROM done`) != 0 {
		t.Fatalf("batch with a refusal: err %v; want an error and nothing committed", err)
	}
	if err := tr.run(ctx, []*Message{bad}, nil, nil); Reason(err) != "mismatch" {
		t.Fatalf("alone: err %v; want the refusal", err)
	}
	again := decoded(t, "bad", 1)
	again.Event, again.Record = bad.Event, bad.Record
	if err := tr.run(ctx, []*Message{good, again}, nil, nil); err == nil || count(t, pool, `SELECT count(*) FROM done`) != 1 {
		t.Fatalf("batch with a refused duplicate: err %v; want an error, only the refusal's row", err)
	}
}
