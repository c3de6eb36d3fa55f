package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/migrate"
)

// setup returns a pool on a fresh database with the idempotency table and
// a business table "effects" counting how often the work ran per key.
func setup(t *testing.T, opts ...migrate.Option) *pgxpool.Pool {
	t.Helper()
	return setupPool(t, testenv.Postgres(t), opts...)
}

// setupWide is setup with a pool of maxConns connections, so that that many
// transactions can really run at once.
func setupWide(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return setupPool(t, pool)
}

func setupPool(t *testing.T, pool *pgxpool.Pool, opts ...migrate.Option) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	if err := migrate.Up(ctx, pool, opts...); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (key text PRIMARY KEY, n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

// effect is the business write: it counts executions per key.
func effect(ctx context.Context, tx pgx.Tx, key string) error {
	_, err := tx.Exec(ctx, `INSERT INTO effects (key, n) VALUES ($1, 1)
		ON CONFLICT (key) DO UPDATE SET n = effects.n + 1`, key)
	return err
}

func effects(t *testing.T, pool *pgxpool.Pool, key string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `SELECT coalesce((SELECT n FROM effects WHERE key = $1), 0)`, key).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMigrateIsIdempotentUnderConcurrency(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA billing`); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{idempotency.DefaultTable, "billing.Idem Keys"} {
		t.Run(table, func(t *testing.T) {
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for range 8 {
				wg.Go(func() { errs <- migrate.Up(ctx, pool, migrate.WithIdempotencyTable(table)) })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("concurrent Up: %v", err)
				}
			}
			if err := migrate.Up(ctx, pool, migrate.WithIdempotencyTable(table)); err != nil {
				t.Fatalf("repeated Up: %v", err)
			}
			store := newStore(t, idempotency.WithTable(table))
			_, dup, err := store.Do(ctx, pool, "s", "k", nil, func(context.Context, pgx.Tx) ([]byte, error) { return nil, nil })
			if err != nil || dup {
				t.Fatalf("Do on migrated table: dup=%v err=%v", dup, err)
			}
		})
	}
	var indexes int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = 'billing'
		AND tablename = 'Idem Keys' AND indexname IN ('Idem Keys_pkey', 'Idem Keys_expires_at_idx')`).Scan(&indexes); err != nil || indexes != 2 {
		t.Fatalf("custom table has %d of its 2 indexes (%v)", indexes, err)
	}
	if custom, err := migrate.SQL(migrate.WithIdempotencyTable("billing.Idem Keys")); err != nil ||
		!strings.Contains(custom, `"billing"."Idem Keys"`) || strings.Contains(custom, "choreo_idempotency") {
		t.Fatalf("SQL for a custom table:\n%s (%v)", custom, err)
	}
	for _, bad := range []string{"", "a.b.c", ".x", "x."} {
		if _, err := idempotency.NewStore(idempotency.WithTable(bad)); !errors.Is(err, idempotency.ErrInvalidConfig) {
			t.Errorf("NewStore(WithTable(%q)) = %v, want ErrInvalidConfig", bad, err)
		}
	}
}

func TestClaimOutcomes(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	store := newStore(t)
	h1 := idempotency.Hash([]byte("order.created"), []byte(`{"id":1}`))
	h2 := idempotency.Hash([]byte("order.created"), []byte(`{"id":2}`))

	// claim runs one transaction: Claim, then (first time) the effect and
	// Complete with resp, then commit or rollback.
	claim := func(scope, key string, hash, resp []byte, commit bool) (idempotency.Claim, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		c, err := store.Claim(ctx, tx, scope, key, hash)
		if err != nil {
			return c, err
		}
		if !c.Duplicate {
			if err := effect(ctx, tx, scope+"/"+key); err != nil {
				t.Fatal(err)
			}
			if resp != nil {
				if err := store.Complete(ctx, tx, scope, key, resp); err != nil {
					t.Fatal(err)
				}
			}
		}
		if commit {
			return c, tx.Commit(ctx)
		}
		return c, nil
	}

	steps := []struct {
		name          string
		scope, key    string
		hash, resp    []byte
		commit        bool
		wantDuplicate bool
		wantResponse  []byte
		wantErr       error
		wantEffects   int
	}{
		{"first claim rolled back", "payment", "ev-1", h1, []byte("r1"), false, false, nil, nil, 0},
		{"redelivery after rollback does the work", "payment", "ev-1", h1, []byte("r1"), true, false, nil, nil, 1},
		{"duplicate gets stored response", "payment", "ev-1", h1, nil, true, true, []byte("r1"), nil, 1},
		{"same key different hash", "payment", "ev-1", h2, nil, true, false, nil, idempotency.ErrKeyReused, 1},
		{"same key other scope", "inventory", "ev-1", h2, nil, true, false, nil, nil, 1},
		{"duplicate without response", "inventory", "ev-1", h2, nil, true, true, nil, nil, 1},
		{"nil hash first", "payment", "ev-2", nil, nil, true, false, nil, nil, 1},
		{"nil hash equals empty hash", "payment", "ev-2", []byte{}, nil, true, true, nil, nil, 1},
		{"nil hash vs real hash", "payment", "ev-2", h1, nil, true, false, nil, idempotency.ErrKeyReused, 1},
	}
	for _, s := range steps {
		c, err := claim(s.scope, s.key, s.hash, s.resp, s.commit)
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("%s: err = %v, want %v", s.name, err, s.wantErr)
		}
		if c.Duplicate != s.wantDuplicate || !bytes.Equal(c.Response, s.wantResponse) {
			t.Fatalf("%s: claim = %+v, want duplicate=%v response=%q", s.name, c, s.wantDuplicate, s.wantResponse)
		}
		if got := effects(t, pool, s.scope+"/"+s.key); got != s.wantEffects {
			t.Fatalf("%s: effects = %d, want %d", s.name, got, s.wantEffects)
		}
	}
}

func TestInvalidKeys(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	store := newStore(t)
	long := strings.Repeat("k", idempotency.MaxKeyBytes+1)
	// 85 three-byte runes = 255 bytes: the limit is bytes, not characters.
	maxMultibyte := strings.Repeat("€", 85)
	tests := []struct {
		name, scope, key string
		ok               bool
	}{
		{"empty scope", "", "k", false},
		{"empty key", "s", "", false},
		{"scope too long", long, "k", false},
		{"key too long", "s", long, false},
		{"key too long in bytes", "s", maxMultibyte + "€", false},
		{"longest key", "s", maxMultibyte, true},
		{"longest scope", strings.Repeat("s", idempotency.MaxKeyBytes), "k", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := store.Do(ctx, pool, tt.scope, tt.key, nil, func(context.Context, pgx.Tx) ([]byte, error) { return nil, nil })
			if tt.ok && err != nil {
				t.Fatalf("Do: %v", err)
			}
			if !tt.ok && !errors.Is(err, idempotency.ErrInvalidKey) {
				t.Fatalf("Do: err = %v, want ErrInvalidKey", err)
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := store.Claim(ctx, tx, tt.scope, tt.key, nil); !tt.ok && !errors.Is(err, idempotency.ErrInvalidKey) {
				t.Fatalf("Claim: err = %v, want ErrInvalidKey", err)
			}
			if err := store.Complete(ctx, tx, tt.scope, tt.key, nil); !tt.ok && !errors.Is(err, idempotency.ErrInvalidKey) {
				t.Fatalf("Complete: err = %v, want ErrInvalidKey", err)
			}
		})
	}
}

func TestCompleteWithoutClaim(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	err = newStore(t).Complete(ctx, tx, "s", "never-claimed", []byte("x"))
	if !errors.Is(err, idempotency.ErrNotClaimed) {
		t.Fatalf("Complete = %v, want ErrNotClaimed", err)
	}
}

// TestConcurrentSameKeyExactlyOnce is the core guarantee: 50 goroutines
// deliver the same event at once; the business effect happens exactly once
// and the other 49 see a duplicate with the winner's response.
func TestConcurrentSameKeyExactlyOnce(t *testing.T) {
	// 20 connections: the 50 transactions really overlap, without taking
	// half of a shared server's max_connections.
	pool := setupWide(t, 20)
	ctx := context.Background()
	store := newStore(t)
	hash := idempotency.Hash([]byte("payload"))

	const workers = 50
	var (
		ran, dups atomic.Int64
		start     = make(chan struct{})
		wg        sync.WaitGroup
		errs      = make(chan error, workers)
		responses = make(chan []byte, workers)
	)
	for i := range workers {
		wg.Go(func() {
			<-start
			resp, dup, err := store.Do(ctx, pool, "payment", "order-42", hash, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				ran.Add(1)
				if err := effect(ctx, tx, "order-42"); err != nil {
					return nil, err
				}
				return fmt.Appendf(nil, "charged by %d", i), nil
			})
			if err != nil {
				errs <- err
				return
			}
			if dup {
				dups.Add(1)
			}
			responses <- resp
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	close(responses)
	for err := range errs {
		t.Errorf("Do: %v", err)
	}
	if got := effects(t, pool, "order-42"); got != 1 {
		t.Fatalf("business effects = %d, want 1", got)
	}
	if ran.Load() != 1 || dups.Load() != workers-1 {
		t.Fatalf("fn ran %d times, %d duplicates; want 1 and %d", ran.Load(), dups.Load(), workers-1)
	}
	var first []byte
	for r := range responses {
		if first == nil {
			first = r
		}
		if !bytes.Equal(r, first) || !bytes.HasPrefix(r, []byte("charged by ")) {
			t.Fatalf("responses differ: %q vs %q", r, first)
		}
	}
}

// TestConcurrentClaimWaitsForWinner pins down the blocking behaviour: a
// second transaction claiming a key held by an open transaction waits,
// and then sees a duplicate if the first commits (its INSERT, which waited,
// does nothing, and a lookup reads the committed record), or claims the key
// itself if the first rolls back (the INSERT alone).
func TestConcurrentClaimWaitsForWinner(t *testing.T) {
	for _, tt := range []struct {
		name          string
		commitFirst   bool
		wantDuplicate bool
		statements    int64
	}{
		{"first commits", true, true, 2},
		{"first rolls back", false, false, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pool := setup(t)
			ctx := context.Background()
			store := newStore(t)

			first, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback(ctx)
			if c, err := store.Claim(ctx, first, "s", "k", []byte("h")); err != nil || c.Duplicate {
				t.Fatalf("first claim: %+v %v", c, err)
			}
			if err := store.Complete(ctx, first, "s", "k", []byte("first")); err != nil {
				t.Fatal(err)
			}

			type result struct {
				c   idempotency.Claim
				err error
			}
			done := make(chan result, 1)
			// The second transaction's statements are counted on a pool of its own.
			cfg := pool.Config()
			counter := new(statementCounter)
			cfg.ConnConfig.Tracer = counter
			pool2, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool2.Close()
			second, err := pool2.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer second.Rollback(ctx)
			var pid uint32
			if err := second.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				t.Fatal(err)
			}
			before := counter.n.Load()
			go func() {
				c, err := store.Claim(ctx, second, "s", "k", []byte("h"))
				done <- result{c, err}
			}()
			testenv.WaitForLockWait(t, pool, pid)
			select {
			case r := <-done:
				t.Fatalf("second claim returned while the first transaction was open: %+v", r)
			default:
			}

			if tt.commitFirst {
				err = first.Commit(ctx)
			} else {
				err = first.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatalf("second claim: %v", r.err)
			}
			if r.c.Duplicate != tt.wantDuplicate {
				t.Fatalf("second claim duplicate = %v, want %v", r.c.Duplicate, tt.wantDuplicate)
			}
			if tt.wantDuplicate && string(r.c.Response) != "first" {
				t.Fatalf("second claim response = %q, want %q", r.c.Response, "first")
			}
			if n := counter.n.Load() - before; n != tt.statements {
				t.Fatalf("second claim sent %d statements, want %d", n, tt.statements)
			}
		})
	}
}

func TestDo(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	store := newStore(t)
	boom := errors.New("boom")

	var calls int
	fn := func(fail bool, resp []byte) func(context.Context, pgx.Tx) ([]byte, error) {
		return func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			calls++
			if err := effect(ctx, tx, "k"); err != nil {
				return nil, err
			}
			if fail {
				return nil, boom
			}
			return resp, nil
		}
	}
	if _, _, err := store.Do(ctx, pool, "http", "k", []byte("h"), fn(true, nil)); err != boom {
		t.Fatalf("failing fn: err = %v, want the fn's error unchanged", err)
	}
	if n := effects(t, pool, "k"); n != 0 {
		t.Fatalf("failing fn left %d effects", n)
	}
	resp, dup, err := store.Do(ctx, pool, "http", "k", []byte("h"), fn(false, []byte(`{"status":201}`)))
	if err != nil || dup || string(resp) != `{"status":201}` {
		t.Fatalf("first Do = %q, %v, %v", resp, dup, err)
	}
	resp, dup, err = store.Do(ctx, pool, "http", "k", []byte("h"), fn(false, []byte("other")))
	if err != nil || !dup || string(resp) != `{"status":201}` {
		t.Fatalf("replayed Do = %q, %v, %v", resp, dup, err)
	}
	if _, _, err := store.Do(ctx, pool, "http", "k", []byte("h2"), fn(false, nil)); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("reused key: err = %v, want ErrKeyReused", err)
	}
	if calls != 2 || effects(t, pool, "k") != 1 {
		t.Fatalf("fn calls = %d, effects = %d; want 2 and 1", calls, effects(t, pool, "k"))
	}
}

func TestExpiredRecordNoLongerGuards(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	store := newStore(t, idempotency.WithRetention(time.Microsecond))
	run := func(hash string) (bool, error) {
		_, dup, err := store.Do(ctx, pool, "s", "k", []byte(hash), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			return []byte(hash), effect(ctx, tx, "k")
		})
		return dup, err
	}
	if dup, err := run("a"); err != nil || dup {
		t.Fatalf("first: %v %v", dup, err)
	}
	// The record expired a microsecond after the first transaction began;
	// the same key, even with another hash, is a first time again.
	if dup, err := run("b"); err != nil || dup {
		t.Fatalf("after expiry: dup=%v err=%v, want a first-time claim", dup, err)
	}
	if n := effects(t, pool, "k"); n != 2 {
		t.Fatalf("effects = %d, want 2", n)
	}
	var hash []byte
	if err := pool.QueryRow(ctx, `SELECT request_hash FROM choreo_idempotency WHERE scope = 's' AND key = 'k'`).Scan(&hash); err != nil {
		t.Fatal(err)
	}
	if string(hash) != "b" {
		t.Fatalf("stored hash = %q, want the new claim's", hash)
	}
	if got := newStore(t).Retention(); got != idempotency.DefaultRetention {
		t.Fatalf("default retention = %v", got)
	}
}

// TestConcurrentTakeoverOfExpiredRecord: an expired record that is still in
// the table is taken over by exactly one of many concurrent claims.
func TestConcurrentTakeoverOfExpiredRecord(t *testing.T) {
	pool := setupWide(t, 10)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO choreo_idempotency (scope, key, request_hash, expires_at)
		VALUES ('s', 'k', 'old', now() - interval '1 second')`); err != nil {
		t.Fatal(err)
	}
	store := newStore(t)
	var (
		wg        sync.WaitGroup
		ran, dups atomic.Int64
		start     = make(chan struct{})
	)
	for range 20 {
		wg.Go(func() {
			<-start
			_, dup, err := store.Do(ctx, pool, "s", "k", []byte("new"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				ran.Add(1)
				return nil, effect(ctx, tx, "k")
			})
			if err != nil {
				t.Error(err)
			}
			if dup {
				dups.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := effects(t, pool, "k"); n != 1 || ran.Load() != 1 || dups.Load() != 19 {
		t.Fatalf("effects = %d, fn ran %d times, %d duplicates; want 1, 1, 19", n, ran.Load(), dups.Load())
	}
}

func TestInvalidOptionsAreErrors(t *testing.T) {
	for name, opt := range map[string]idempotency.Option{
		"retention":     idempotency.WithRetention(0),
		"table":         idempotency.WithTable(""),
		"sweeper batch": idempotency.WithBatchSize(10),
	} {
		if _, err := idempotency.NewStore(opt); !errors.Is(err, idempotency.ErrInvalidConfig) {
			t.Errorf("NewStore(%s): %v, want ErrInvalidConfig", name, err)
		}
	}
	for name, opt := range map[string]idempotency.Option{
		"table":           idempotency.WithTable(""),
		"batch":           idempotency.WithBatchSize(-1),
		"interval":        idempotency.WithSweepInterval(0),
		"hook":            idempotency.WithSweepHook(nil),
		"store retention": idempotency.WithRetention(time.Hour),
	} {
		if _, err := idempotency.NewSweeper(nil, opt); !errors.Is(err, idempotency.ErrInvalidConfig) {
			t.Errorf("NewSweeper(%s): %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestHash(t *testing.T) {
	tests := []struct {
		name string
		a, b [][]byte
		same bool
	}{
		{"deterministic", [][]byte{[]byte("x"), []byte("y")}, [][]byte{[]byte("x"), []byte("y")}, true},
		{"split matters", [][]byte{[]byte("ab"), []byte("c")}, [][]byte{[]byte("a"), []byte("bc")}, false},
		{"empty part matters", [][]byte{[]byte("a")}, [][]byte{[]byte("a"), nil}, false},
		{"order matters", [][]byte{[]byte("a"), []byte("b")}, [][]byte{[]byte("b"), []byte("a")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ha, hb := idempotency.Hash(tt.a...), idempotency.Hash(tt.b...)
			if len(ha) != 32 {
				t.Fatalf("len = %d, want 32 (SHA-256)", len(ha))
			}
			if bytes.Equal(ha, hb) != tt.same {
				t.Fatalf("Hash equal = %v, want %v", !tt.same, tt.same)
			}
		})
	}
}

// TestClaimInSavepoint: a claim made in a savepoint (a nested pgx.Tx) that
// is rolled back leaves the key free, while the outer transaction goes on.
func TestClaimInSavepoint(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	store := newStore(t, idempotency.WithRetention(36*time.Hour))
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if c, err := store.Claim(ctx, sp, "s", "k", []byte("h")); err != nil || c.Duplicate {
			return fmt.Errorf("claim in savepoint: %+v %w", c, err)
		}
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		c, err := store.Claim(ctx, tx, "s", "k", []byte("h"))
		if err != nil || c.Duplicate {
			return fmt.Errorf("claim after savepoint rollback: %+v %w", c, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var lifetime time.Duration
	if err := pool.QueryRow(ctx, `SELECT expires_at - created_at FROM choreo_idempotency WHERE scope = 's' AND key = 'k'`).Scan(&lifetime); err != nil {
		t.Fatal(err)
	}
	if lifetime != 36*time.Hour {
		t.Fatalf("record lifetime = %v, want the configured retention 36h", lifetime)
	}
}

func TestClaimErrorsAreWrapped(t *testing.T) {
	pool := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	cancel()
	_, err = newStore(t).Claim(ctx, tx, "s", "k", nil)
	if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "idempotency: claim") {
		t.Fatalf("Claim with cancelled ctx = %v, want a wrapped context.Canceled", err)
	}
}

// newStore is idempotency.NewStore that fails the test on an error.
func newStore(t testing.TB, opts ...idempotency.Option) *idempotency.Store {
	t.Helper()
	s, err := idempotency.NewStore(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newSweeper is idempotency.NewSweeper that fails the test on an error.
func newSweeper(t testing.TB, db migrate.Execer, opts ...idempotency.Option) *idempotency.Sweeper {
	t.Helper()
	s, err := idempotency.NewSweeper(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestClaimStatements checks that Claim sends one statement for a first-time claim (the
// INSERT), and two for a duplicate and a key reused with another hash: the INSERT does
// nothing and the lookup reads the record, with the response the first claim stored.
func TestClaimStatements(t *testing.T) {
	pool, counter := setupCounted(t, "")
	ctx := context.Background()
	store := newStore(t)
	h1 := idempotency.Hash([]byte("order.created"), []byte(`{"id":1}`))
	h2 := idempotency.Hash([]byte("order.created"), []byte(`{"id":2}`))
	steps := []struct {
		name       string
		hash       []byte
		want       idempotency.Claim
		wantErr    error
		statements int64
	}{
		{"first time", h1, idempotency.Claim{}, nil, 1},
		{"duplicate", h1, idempotency.Claim{Duplicate: true, Response: []byte("r1")}, nil, 2},
		{"key reused", h2, idempotency.Claim{}, idempotency.ErrKeyReused, 2},
	}
	for _, s := range steps {
		var (
			c idempotency.Claim
			n int64
		)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			before := counter.n.Load()
			var err error
			c, err = store.Claim(ctx, tx, "payment", "ev-1", s.hash)
			n = counter.n.Load() - before
			if err != nil || c.Duplicate {
				return err
			}
			return store.Complete(ctx, tx, "payment", "ev-1", []byte("r1"))
		})
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) || !reflect.DeepEqual(c, s.want) {
			t.Fatalf("%s: Claim = %+v, %v; want %+v, %v", s.name, c, err, s.want, s.wantErr)
		}
		if n != s.statements {
			t.Fatalf("%s: Claim sent %d statements, want %d", s.name, n, s.statements)
		}
	}
}
