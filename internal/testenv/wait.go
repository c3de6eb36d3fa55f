package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Timeout is the hang guard of the waits of choreo's tests: long enough never to
// fire on a loaded machine, short enough that a hang fails the test instead of the
// whole run.
const Timeout = time.Minute

// pollEvery is how often Eventually and WaitForLockWait look again.
const pollEvery = 10 * time.Millisecond

// Eventually polls cond until it holds; after timeout it fails t, naming what it
// waited for. The timeout is a hang guard, not a performance assertion: pass
// [Timeout] unless the test has a reason to give up sooner.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(pollEvery)
	}
}

// Querier runs a query returning one row; *pgxpool.Pool and *pgx.Conn satisfy it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// WaitForLockWait waits until the Postgres backend pid is blocked on a lock
// (pg_stat_activity.wait_event_type = 'Lock'), failing t after [Timeout]. Tests use
// it to know that a second transaction is queued behind a row or advisory lock
// before they let the first one go, instead of sleeping and hoping. db must be a
// session other than pid's.
func WaitForLockWait(t testing.TB, db Querier, pid uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	for {
		var waiting bool
		err := db.QueryRow(ctx, `SELECT coalesce((SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1), false)`, pid).Scan(&waiting)
		if err != nil {
			t.Fatalf("testenv: backend %d never waited on a lock: %v", pid, err)
		}
		if waiting {
			return
		}
		time.Sleep(pollEvery)
	}
}
