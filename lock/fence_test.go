package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
)

// setupFences returns a pool on a fresh database with choreo_lock_fences and
// a business table "accounts" with one row.
func setupFences(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testenv.Postgres(t)
	ctx := context.Background()
	if err := migrate.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id text PRIMARY KEY, written_by text);
		INSERT INTO accounts VALUES ('acct-1', 'nobody')`); err != nil {
		t.Fatal(err)
	}
	return pool
}

// write is the fenced business transaction of a holder.
func write(ctx context.Context, pool *pgxpool.Pool, entity string, token int64, who string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lock.CheckFence(ctx, tx, entity, token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE accounts SET written_by = $1 WHERE id = 'acct-1'`, who)
		return err
	})
}

func writtenBy(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var who string
	if err := pool.QueryRow(context.Background(), `SELECT written_by FROM accounts WHERE id = 'acct-1'`).Scan(&who); err != nil {
		t.Fatal(err)
	}
	return who
}

// TestPausedHolderIsFencedOff is the scenario the fencing token exists for:
// holder A acquires, is paused past its TTL (no watchdog runs while a
// process is paused), B acquires and commits, and A's later commit is
// rejected by Postgres.
func TestPausedHolderIsFencedOff(t *testing.T) {
	pool := setupFences(t)
	locker, _ := newLocker(t, lock.WithTTL(100*time.Millisecond), lock.WithoutWatchdog(), lock.WithRetryBackoff(time.Millisecond, 10*time.Millisecond), lock.WithMaxWait(time.Minute))
	ctx := waitCtx(t)

	a, err := locker.Acquire(ctx, "acct-1")
	if err != nil {
		t.Fatal(err)
	}
	// A is paused here. B's Acquire retries until A's lock expires in Redis.
	b, err := locker.Acquire(ctx, "acct-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, pool, b.Key(), b.Token(), "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	// A wakes up, unaware (it does not look at its lease), and tries to commit.
	err = write(ctx, pool, a.Key(), a.Token(), "A")
	if !errors.Is(err, lock.ErrStaleToken) {
		t.Fatalf("A's stale write: err = %v, want ErrStaleToken", err)
	}
	if who := writtenBy(t, pool); who != "B" {
		t.Fatalf("account written by %q, want B", who)
	}
	// B may write again with the same token.
	if err := write(ctx, pool, b.Key(), b.Token(), "B again"); err != nil {
		t.Fatalf("B's second write: %v", err)
	}
	// A holder that does look at its lease fails even before the upsert.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return a.CheckFence(ctx, tx) })
	if !errors.Is(err, lock.ErrLost) {
		t.Fatalf("A's Lease.CheckFence = %v, want ErrLost", err)
	}
	_ = b.Release(ctx)
	_ = a.Release(ctx)
}

// TestConcurrentFencedTransactions: the fence row lock serialises
// transactions on one entity. Whichever order they reach the fence in, a
// lower token never commits after a higher one.
func TestConcurrentFencedTransactions(t *testing.T) {
	for _, tt := range []struct {
		name            string
		firstToken      int64
		secondToken     int64
		wantSecondStale bool
	}{
		{"newer holder first: older waits, then is stale", 20, 10, true},
		{"older holder first: newer waits, then commits", 10, 20, false},
		{"same token: waits, then commits", 10, 10, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pool := setupFences(t)
			ctx := waitCtx(t)
			first, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback(ctx)
			if err := lock.CheckFence(ctx, first, "acct-1", tt.firstToken); err != nil {
				t.Fatal(err)
			}

			second, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer second.Rollback(ctx)
			var pid uint32
			if err := second.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- lock.CheckFence(ctx, second, "acct-1", tt.secondToken) }()
			testenv.WaitForLockWait(t, pool, pid)
			select {
			case err := <-done:
				t.Fatalf("second CheckFence returned while the first transaction was open: %v", err)
			default:
			}
			if err := first.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			err = <-done
			if tt.wantSecondStale != errors.Is(err, lock.ErrStaleToken) || (!tt.wantSecondStale && err != nil) {
				t.Fatalf("second CheckFence = %v, want stale=%v", err, tt.wantSecondStale)
			}
		})
	}
}

func TestUpConcurrentAndRepeated(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- migrate.Up(ctx, pool) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Up: %v", err)
		}
	}
	if err := migrate.Up(ctx, pool); err != nil {
		t.Fatalf("repeated Up: %v", err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return lock.CheckFence(ctx, tx, "e", 1) }); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return lock.CheckFence(ctx, tx, "", 1) }); !errors.Is(err, lock.ErrInvalidEntity) {
		t.Fatalf("empty entity: %v", err)
	}
}

func TestPruneFences(t *testing.T) {
	pool := setupFences(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
		INSERT INTO choreo_lock_fences (entity, token, updated_at)
		SELECT 'old-' || i, i, now() - interval '30 days' FROM generate_series(1, 25) AS i;
		INSERT INTO choreo_lock_fences (entity, token) VALUES ('fresh', 1)`); err != nil {
		t.Fatal(err)
	}
	n, err := lock.PruneFences(ctx, pool, 7*24*time.Hour, 10)
	if err != nil || n != 25 {
		t.Fatalf("PruneFences = %d, %v; want 25", n, err)
	}
	var left []string
	rows, _ := pool.Query(ctx, `SELECT entity FROM choreo_lock_fences`)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(left) != 1 || left[0] != "fresh" {
		t.Fatalf("left %v, %v; want [fresh]", left, err)
	}
	if _, err := lock.PruneFences(ctx, pool, 0, 10); err == nil {
		t.Fatal("PruneFences accepted olderThan 0")
	}
}
