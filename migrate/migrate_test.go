package migrate_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
)

func TestDefaultsMatchPackages(t *testing.T) {
	if migrate.DefaultIdempotencyTable != idempotency.DefaultTable || migrate.DefaultOutboxTable != outbox.DefaultTable ||
		migrate.DefaultDeadLetterTable != consumer.DefaultDeadLetterTable {
		t.Fatal("a default table name differs from its package's")
	}
}

func TestUp(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA billing"); err != nil {
		t.Fatal(err)
	}
	opts := []migrate.Option{
		migrate.WithIdempotencyTable("billing.Idem"), migrate.WithOutboxTable("billing.out"), migrate.WithDeadLetterTable("dl"),
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = migrate.Up(ctx, pool, opts...) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	vs, err := migrate.Versions(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vs {
		if v.Version != 1 || v.AppliedAt.IsZero() {
			t.Errorf("%+v", v)
		}
		got = append(got, v.Component)
	}
	want := "dead_letters:public.dl idempotency:billing.Idem lock_fences:public.choreo_lock_fences outbox:billing.out"
	if strings.Join(got, " ") != want {
		t.Fatalf("components = %v, want %s", got, want)
	}

	// Up again finds every version recorded and applies nothing.
	if err := migrate.Up(ctx, pool, opts...); err != nil {
		t.Fatal(err)
	}
	if vs2, err := migrate.Versions(ctx, pool); err != nil || len(vs2) != len(vs) {
		t.Fatalf("versions after a second Up: %v, %v", vs2, err)
	}
	// The tables work.
	store, err := idempotency.NewStore(idempotency.WithTable("billing.Idem"))
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := store.Claim(ctx, tx, "s", "k", idempotency.Hash([]byte("x")))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Up inside the caller's transaction is rolled back with it.
func TestUpInTransaction(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if vs, err := migrate.Versions(ctx, pool); err != nil || len(vs) != 0 {
		t.Fatalf("Versions after rollback = %v, %v", vs, err)
	}
}

func TestInvalidTables(t *testing.T) {
	for _, o := range []migrate.Option{
		migrate.WithIdempotencyTable(""), migrate.WithIdempotencyTable("a.b.c"), migrate.WithDeadLetterTable("a."),
		migrate.WithOutboxTable("Outbox"), migrate.WithOutboxTable("x; DROP TABLE y"),
	} {
		if err := migrate.Up(context.Background(), nil, o); !errors.Is(err, migrate.ErrInvalidTable) {
			t.Errorf("Up = %v, want ErrInvalidTable", err)
		}
		if _, err := migrate.SQL(o); !errors.Is(err, migrate.ErrInvalidTable) {
			t.Errorf("SQL = %v, want ErrInvalidTable", err)
		}
	}
}

func TestSQL(t *testing.T) {
	s, err := migrate.SQL()
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{`CREATE TABLE IF NOT EXISTS "choreo_idempotency"`,
		`CREATE TABLE IF NOT EXISTS "choreo_lock_fences"`, `CREATE TABLE IF NOT EXISTS "choreo_outbox" (`,
		`CREATE TABLE IF NOT EXISTS "choreo_outbox_dead" (`, `CREATE TABLE IF NOT EXISTS "choreo_dead_letters"`} {
		if !strings.Contains(s, part) {
			t.Errorf("SQL lacks\n%s", part)
		}
	}
	// The script is what Up runs, so it can be run as is, and again.
	pool := testenv.Postgres(t)
	for range 2 {
		if _, err := pool.Exec(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	if err := migrate.Up(context.Background(), pool); err != nil {
		t.Fatalf("Up after the script: %v", err)
	}
}
