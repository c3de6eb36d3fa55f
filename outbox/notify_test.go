package outbox_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
)

// gatedNotifier runs every statement of the Outbox's notifier on the real
// database, in a transaction of its own, and records the transaction's
// synchronous_commit after it. The first statement waits until release is closed.
type gatedNotifier struct {
	pool    *pgxpool.Pool
	release chan struct{}
	started chan struct{} // closed when the first statement arrives

	mu    sync.Mutex
	calls int
	sync  []string // synchronous_commit seen by each statement's transaction
	once  sync.Once
}

func (g *gatedNotifier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	g.once.Do(func() {
		close(g.started)
		<-g.release
	})
	var setting string
	err := pgx.BeginFunc(ctx, g.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&setting)
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	g.sync = append(g.sync, setting)
	return pgconn.CommandTag{}, err
}

func (g *gatedNotifier) seen() (int, []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls, append([]string(nil), g.sync...)
}

// TestNotifyCoalescedWithoutFlushWait: without an in-process leader, Wake sends a
// NOTIFY that listeners receive; Wake calls while one is in flight add exactly one
// more; and each NOTIFY's transaction commits with synchronous_commit off.
func TestNotifyCoalescedWithoutFlushWait(t *testing.T) {
	pool := db(t)
	ctx := context.Background()
	listener, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(ctx, "LISTEN choreo_outbox"); err != nil {
		t.Fatal(err)
	}

	g := &gatedNotifier{pool: pool, release: make(chan struct{}), started: make(chan struct{})}
	ob := newOutbox(t, outbox.WithNotifier(g))
	ob.Wake()
	<-g.started // the first NOTIFY is in flight
	for range 100 {
		ob.Wake()
	}
	close(g.release)

	// The first NOTIFY and one more for the 100 Wakes during it.
	testenv.Eventually(t, deadline, "two NOTIFYs", func() bool { n, _ := g.seen(); return n == 2 })
	wctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	if _, err := listener.Conn().WaitForNotification(wctx); err != nil {
		t.Fatalf("no notification reached the listener: %v", err)
	}
	// A later Wake, after the loop ended, sends a NOTIFY again.
	testenv.Eventually(t, deadline, "a third NOTIFY after a later Wake", func() bool {
		ob.Wake()
		n, _ := g.seen()
		return n >= 3
	})
	_, settings := g.seen()
	for i, s := range settings {
		if s != "off" {
			t.Errorf("NOTIFY %d committed with synchronous_commit %q, want off", i+1, s)
		}
	}
}
