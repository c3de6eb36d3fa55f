package outbox_test

import (
	"context"
	"sync"
	"testing"

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
