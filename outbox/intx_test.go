package outbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
)

// batchTrace records the statements of every pgx batch and every query sent alone.
type batchTrace struct {
	mu      sync.Mutex
	batches []string // a batch's statements' first words, joined by " "
	alone   []string
}

func (b *batchTrace) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	b.mu.Lock()
	b.alone = append(b.alone, firstWord(d.SQL))
	b.mu.Unlock()
	return ctx
}

func (b *batchTrace) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (b *batchTrace) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	b.mu.Lock()
	b.batches = append(b.batches, "")
	b.mu.Unlock()
	return ctx
}

func (b *batchTrace) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batches[len(b.batches)-1] = strings.TrimSpace(b.batches[len(b.batches)-1] + " " + firstWord(d.SQL))
}

func (b *batchTrace) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func firstWord(sql string) string {
	w, _, _ := strings.Cut(strings.TrimSpace(sql), " ")
	return strings.ToLower(w)
}

// InTx writes the rows of every Enqueue of fn in one INSERT that goes out with the COMMIT,
// the BEGIN with fn's first statement; a failing fn writes nothing.
func TestInTxWritesRowsWithTheCommit(t *testing.T) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	tr := &batchTrace{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := outbox.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE entities (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New()
	if err != nil {
		t.Fatal(err)
	}
	tr.batches, tr.alone = nil, nil

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
	if got := strings.Join(tr.batches, " | "); got != "begin insert | insert commit" || len(tr.alone) != 0 {
		t.Errorf("round trips: batches %q, alone %q; want [begin insert] and [insert commit]", tr.batches, tr.alone)
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
