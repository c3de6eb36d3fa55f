package outbox_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
)

// gatedNotifier runs every statement of the Outbox's notifier on the real
// database and counts them. The first statement waits until release is closed.
type gatedNotifier struct {
	pool    *pgxpool.Pool
	release chan struct{}
	started chan struct{} // closed when the first statement arrives

	mu    sync.Mutex
	calls int
	once  sync.Once
}

func (g *gatedNotifier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	g.once.Do(func() {
		close(g.started)
		<-g.release
	})
	tag, err := g.pool.Exec(ctx, sql, args...)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	return tag, err
}

func (g *gatedNotifier) seen() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// TestNotifyCoalesced: without an in-process leader, Wake sends a NOTIFY that
// listeners receive; Wake calls while one is in flight add exactly one more; a Wake
// after that still sends one.
func TestNotifyCoalesced(t *testing.T) {
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
	testenv.Eventually(t, deadline, "two NOTIFYs", func() bool { return g.seen() == 2 })
	wctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	if _, err := listener.Conn().WaitForNotification(wctx); err != nil {
		t.Fatalf("no notification reached the listener: %v", err)
	}
	// A later Wake, after the loop ended, sends a NOTIFY again.
	testenv.Eventually(t, deadline, "a third NOTIFY after a later Wake", func() bool {
		ob.Wake()
		return g.seen() >= 3
	})
}

// countingNotifier sends the Outbox's own NOTIFYs (the ones that are transactions of
// their own) on the real database and counts them.
type countingNotifier struct {
	pool *pgxpool.Pool
	mu   sync.Mutex
	n    int
}

func (c *countingNotifier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.pool.Exec(ctx, sql, args...)
}

func (c *countingNotifier) seen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// The first NOTIFY after a quiet spell rides the writer's commit: InTx (and a Queue
// batch, the order service's implicit transaction) queues a pg_notify with the rows and
// the COMMIT, in the same round trip, the listener hears it when the rows commit, and
// the Wake after the commit sends no NOTIFY of its own. A Wake for a commit that
// carried none still sends one.
func TestNotifyRidesTheCommit(t *testing.T) {
	ctx := context.Background()
	pool, tr := tracedDB(t)
	listener, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(ctx, "LISTEN "+outbox.DefaultTable); err != nil {
		t.Fatal(err)
	}
	heard := func(what string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		if _, err := listener.Conn().WaitForNotification(wctx); err != nil {
			t.Fatalf("%s: no notification: %v", what, err)
		}
	}
	notifier := &countingNotifier{pool: pool}
	ob := newOutbox(t, outbox.WithNotifier(notifier))        // no relay in this process: a standby's writer
	pause := func() { time.Sleep(2 * outbox.NotifySpacing) } // a quiet spell

	pause()
	tr.Take()
	if err := ob.InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		return ob.Enqueue(ctx, tx, "t", newEvent(t, "k", 1))
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tr.Take(), " | "); got != "begin; insert; select; commit" {
		t.Errorf("InTx round trips: %s; want begin; insert; select; commit (the NOTIFY with the COMMIT)", got)
	}
	heard("InTx")

	pause()
	b := &pgx.Batch{}
	if err := ob.Queue(ctx, b, "t", newEvent(t, "k", 2)); err != nil {
		t.Fatal(err)
	}
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	ob.Wake()
	if got := strings.Join(tr.Take(), " | "); got != "insert; select" {
		t.Errorf("Queue batch: %s; want insert; select (the NOTIFY in the implicit transaction)", got)
	}
	heard("Queue batch")
	if n := notifier.seen(); n != 0 {
		t.Fatalf("%d NOTIFYs of their own after commits that carried one, want 0", n)
	}

	// A commit that carried no NOTIFY (rows written at once, outside InTx): Wake sends one.
	pause()
	if _, err := pool.Exec(ctx, `INSERT INTO `+outbox.DefaultTable+` (topic, key, headers, payload) VALUES ('t', 'k', '[]', '{}')`); err != nil {
		t.Fatal(err)
	}
	ob.Wake()
	heard("Wake after a plain commit")
	testenv.Eventually(t, deadline, "one NOTIFY of its own", func() bool { return notifier.seen() == 1 })
}
