package pipetx_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/pipetx"
	"github.com/choreo-saga/choreo/internal/testenv"
)

func setup(t *testing.T) (*pgxpool.Pool, *testenv.RoundTrips) {
	t.Helper()
	return setupMode(t, pgx.QueryExecModeCacheStatement)
}

// setupMode is setup with the pool's statements sent in mode.
func setupMode(t *testing.T, mode pgx.QueryExecMode) (*pgxpool.Pool, *testenv.RoundTrips) {
	t.Helper()
	tr := &testenv.RoundTrips{}
	pool := testenv.PostgresWith(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.DefaultQueryExecMode = mode
		cfg.ConnConfig.Tracer = tr
		cfg.MaxConns = 2
	})
	if _, err := pool.Exec(context.Background(), `CREATE TABLE items (id int PRIMARY KEY, n int NOT NULL CHECK (n >= 0))`); err != nil {
		t.Fatal(err)
	}
	tr.Take()
	return pool, tr
}

func count(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM items`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func insert(id, n int) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO items (id, n) VALUES ($1, $2)`, id, n)
	return b
}

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Errorf("%s: round trips\n got %q\nwant %q", what, got, want)
	}
}

// A transaction on a pool spends no round trip on BEGIN or COMMIT: the BEGIN goes with
// the first statement (QueryRow, Exec or SendBatch), the COMMIT with the last ones.
// In every query execution mode (PgBouncer users pick Exec or SimpleProtocol), too.
func TestBeginAndCommitRideOnStatements(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) { rideOnStatements(t, mode) })
	}
}

// modes are pgx's query execution modes.
var modes = []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}

func rideOnStatements(t *testing.T, mode pgx.QueryExecMode) {
	ctx := context.Background()
	pool, tr := setupMode(t, mode)

	err := pipetx.Run(ctx, pool, func(tx *pipetx.Tx) (*pgx.Batch, error) {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil || one != 1 {
			t.Fatalf("first row: %d, %v", one, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO items (id, n) VALUES (1, 1)`); err != nil {
			t.Fatal(err)
		}
		return insert(2, 2), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "QueryRow first", tr.Take(), []string{"begin; select", "insert", "insert; commit"})
	if n := count(t, pool); n != 2 {
		t.Fatalf("%d rows committed, want 2", n)
	}
	tr.Take()

	tx := pipetx.Begin(pool)
	if _, err := tx.Exec(ctx, `INSERT INTO items (id, n) VALUES (3, 3)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx = pipetx.Begin(pool)
	if err := tx.SendBatch(ctx, insert(4, 4)).Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.CommitWith(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// Nothing but the last statements: BEGIN, they and COMMIT in one round trip.
	if err := pipetx.Run(ctx, pool, func(*pipetx.Tx) (*pgx.Batch, error) { return insert(5, 5), nil }); err != nil {
		t.Fatal(err)
	}
	// Nothing at all: nothing is sent.
	if err := pipetx.Run(ctx, pool, func(*pipetx.Tx) (*pgx.Batch, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	equal(t, "Exec, SendBatch, last only, empty", tr.Take(),
		[]string{"begin; insert", "commit", "begin; insert", "commit", "begin; insert; commit"})
	if n := count(t, pool); n != 5 {
		t.Fatalf("%d rows committed, want 5", n)
	}
	if s := pool.Stat(); s.AcquiredConns() != 0 {
		t.Fatalf("%d connections still acquired", s.AcquiredConns())
	}
	if _, err := tx.Exec(ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("Exec after the commit: %v, want ErrTxClosed", err)
	}
}

// A failing last statement, a failing fn, a panic and a failed statement ignored by fn
// all commit nothing, and the connection goes back to the pool outside any transaction,
// in every query execution mode.
func TestFailuresCommitNothing(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) { failuresCommitNothing(t, mode) })
	}
}

func failuresCommitNothing(t *testing.T, mode pgx.QueryExecMode) {
	ctx := context.Background()
	pool, tr := setupMode(t, mode)
	fail := errors.New("handler failed")

	err := pipetx.Run(ctx, pool, func(tx *pipetx.Tx) (*pgx.Batch, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO items (id, n) VALUES (1, 1)`); err != nil {
			return nil, err
		}
		return insert(2, -1), nil // violates the CHECK
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Fatalf("failing last statement: %v, want a check violation", err)
	}
	// The COMMIT went with the INSERT but did not run; whether pgx's tracer reports it
	// depends on the mode.
	last := "insert"
	if mode == pgx.QueryExecModeExec || mode == pgx.QueryExecModeSimpleProtocol {
		last = "insert; commit"
	}
	equal(t, "failing last statement", tr.Take(), []string{"begin; insert", last, "rollback"})

	err = pipetx.Run(ctx, pool, func(tx *pipetx.Tx) (*pgx.Batch, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO items (id, n) VALUES (3, 3)`); err != nil {
			return nil, err
		}
		return insert(4, 4), fail
	})
	if !errors.Is(err, fail) {
		t.Fatalf("failing fn: %v", err)
	}
	equal(t, "failing fn", tr.Take(), []string{"begin; insert", "rollback"})

	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not go on")
			}
		}()
		_ = pipetx.Run(ctx, pool, func(tx *pipetx.Tx) (*pgx.Batch, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO items (id, n) VALUES (5, 5)`); err != nil {
				return nil, err
			}
			panic("boom")
		})
	}()

	err = pipetx.Run(ctx, pool, func(tx *pipetx.Tx) (*pgx.Batch, error) {
		_, _ = tx.Exec(ctx, `INSERT INTO items (id, n) VALUES (6, -1)`) // error ignored
		return nil, nil
	})
	if !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("commit after an ignored failure: %v, want ErrTxCommitRollback", err)
	}
	if n := count(t, pool); n != 0 {
		t.Fatalf("%d rows committed, want 0", n)
	}
	if s := pool.Stat(); s.AcquiredConns() != 0 {
		t.Fatalf("%d connections still acquired", s.AcquiredConns())
	}
}

// Rollback before any statement sends nothing; after statements it undoes them. A
// transaction that cannot begin (its context is done) reports the error from its first
// statement and from every later one.
func TestRollbackAndBeginFailure(t *testing.T) {
	ctx := context.Background()
	pool, tr := setup(t)

	if err := pipetx.Begin(pool).Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	tx := pipetx.Begin(pool)
	if err := tx.SendBatch(ctx, insert(1, 1)).Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("second Rollback: %v, want ErrTxClosed", err)
	}
	equal(t, "rollbacks", tr.Take(), []string{"begin; insert", "rollback"})

	done, cancel := context.WithCancel(ctx)
	cancel()
	tx = pipetx.Begin(pool)
	var one int
	if err := tx.QueryRow(done, `SELECT 1`).Scan(&one); !errors.Is(err, context.Canceled) {
		t.Fatalf("first statement on a done context: %v", err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1`); err == nil {
		t.Fatal("a statement after the failed BEGIN succeeded")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("Rollback after the failed BEGIN: %v", err)
	}
	if n := count(t, pool); n != 0 {
		t.Fatalf("%d rows committed, want 0", n)
	}
	if s := pool.Stat(); s.AcquiredConns() != 0 {
		t.Fatalf("%d connections still acquired", s.AcquiredConns())
	}

	// No connection at all (a closed pool): every call fails, none panics.
	closed, err := pgxpool.New(ctx, pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	tx = pipetx.Begin(closed)
	if _, err := tx.Exec(ctx, `SELECT 1`); err == nil {
		t.Fatal("Exec on a closed pool succeeded")
	}
	if err := tx.CommitWith(ctx, insert(7, 7)); err == nil {
		t.Fatal("CommitWith on a closed pool succeeded")
	}
	if err := pipetx.Run(ctx, closed, func(*pipetx.Tx) (*pgx.Batch, error) { return insert(8, 8), nil }); err == nil {
		t.Fatal("Run on a closed pool succeeded")
	}
}

// Methods that cannot carry the BEGIN send it first; savepoints nest as in pgx. On a
// pgx.Tx (a savepoint) the transaction begins and commits as pgx.BeginFunc does.
func TestOtherMethodsAndOtherBeginners(t *testing.T) {
	ctx := context.Background()
	pool, tr := setup(t)

	err := pipetx.Run(ctx, pool, func(tx *pipetx.Tx) (*pgx.Batch, error) {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := sp.Exec(ctx, `INSERT INTO items (id, n) VALUES (1, -1)`); err == nil {
			t.Fatal("check violation not reported")
		}
		if err := sp.Rollback(ctx); err != nil {
			return nil, err
		}
		rows, err := tx.Query(ctx, `SELECT id FROM items`)
		if err != nil {
			return nil, err
		}
		rows.Close()
		return insert(2, 2), rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "savepoint first", tr.Take(),
		[]string{"begin", "savepoint", "insert", "rollback", "select", "insert; commit"})

	outer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Rollback(ctx)
	err = pipetx.Run(ctx, outer, func(tx *pipetx.Tx) (*pgx.Batch, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO items (id, n) VALUES (3, 3)`); err != nil {
			return nil, err
		}
		return insert(4, 4), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := outer.QueryRow(ctx, `SELECT count(*) FROM items`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("rows seen in the outer transaction: %d, %v; want 3", n, err)
	}
	if err := outer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool); n != 3 {
		t.Fatalf("%d rows committed, want 3", n)
	}
}
