package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/outbox"
)

// InTx writes the rows of every Enqueue of fn in one INSERT that goes out with the COMMIT,
// the BEGIN with fn's first statement; a failing fn writes nothing.
func TestInTxWritesRowsWithTheCommit(t *testing.T) {
	ctx := context.Background()
	pool, tr := tracedDB(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE entities (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New()
	if err != nil {
		t.Fatal(err)
	}
	tr.Take()

	err = ob.InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO entities (id) VALUES ('k')`); err != nil {
			return err
		}
		if err := ob.Enqueue(ctx, tx, "t", newEvent(t, "k", 1)); err != nil {
			return err
		}
		return ob.Enqueue(ctx, tx, "t", newEvent(t, "k", 2), newEvent(t, "k", 3))
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tr.Take(), " | "); got != "begin; insert | insert; commit" {
		t.Errorf("round trips: %s; want begin; insert | insert; commit", got)
	}
	if n := count(t, pool, outbox.DefaultTable); n != 3 {
		t.Fatalf("%d outbox rows, want 3", n)
	}

	fail := errors.New("fn failed")
	err = ob.InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO entities (id) VALUES ('j')`); err != nil {
			return err
		}
		if err := ob.Enqueue(ctx, tx, "t", newEvent(t, "j", 1)); err != nil {
			return err
		}
		return fail
	})
	if !errors.Is(err, fail) {
		t.Fatalf("InTx: %v, want fn's error", err)
	}
	if n := count(t, pool, outbox.DefaultTable); n != 3 {
		t.Fatalf("%d outbox rows after a failed fn, want 3", n)
	}
	if n := count(t, pool, "entities"); n != 1 {
		t.Fatalf("%d entities after a failed fn, want 1", n)
	}
}
