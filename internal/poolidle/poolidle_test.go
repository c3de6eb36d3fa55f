package poolidle

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/testenv"
)

// openPool opens a pool with a Closer of idle time idle; configure may adjust it first.
func openPool(t *testing.T, idle time.Duration, configure func(*pgxpool.Config)) (*pgxpool.Pool, *Closer) {
	t.Helper()
	var c *Closer
	p := testenv.PostgresWith(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 10
		if configure != nil {
			configure(cfg)
		}
		c = New(cfg, idle)
	})
	return p, c
}

func acquire(t *testing.T, p *pgxpool.Pool) *pgxpool.Conn {
	t.Helper()
	conn, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestSweepKeepsMostRecentlyUsedFirst: after a sweep that closes nothing, the pool hands
// out the connection given back last (pgxpool's own health check would hand out the
// one given back first).
func TestSweepKeepsMostRecentlyUsedFirst(t *testing.T) {
	p, c := openPool(t, time.Hour, nil)
	a, b, last := acquire(t, p), acquire(t, p), acquire(t, p)
	pid := last.Conn().PgConn().PID()
	a.Release()
	b.Release()
	last.Release()
	if n := c.Sweep(context.Background(), p); n != 0 {
		t.Fatalf("Sweep closed %d connections used a moment ago", n)
	}
	next := acquire(t, p)
	defer next.Release()
	if got := next.Conn().PgConn().PID(); got != pid {
		t.Errorf("after a sweep the pool handed out backend %d, want %d (the most recently used)", got, pid)
	}
	if got := p.Stat().TotalConns(); got != 3 {
		t.Errorf("%d connections after a sweep of none, want 3", got)
	}
}

// TestSweepClosesABurstsSurplus: after a burst opened six connections, a steady user of
// one keeps that one while the other five are closed once idle, each after the pool's
// BeforeClose hook; the Closer forgets the closed ones.
func TestSweepClosesABurstsSurplus(t *testing.T) {
	ctx := context.Background()
	var hooked atomic.Int64
	p, c := openPool(t, 300*time.Millisecond, func(cfg *pgxpool.Config) {
		cfg.BeforeClose = func(*pgx.Conn) { hooked.Add(1) }
	})
	burst := make([]*pgxpool.Conn, 6)
	for i := range burst {
		burst[i] = acquire(t, p)
	}
	for _, conn := range burst {
		conn.Release()
	}
	steady := map[uint32]bool{}
	testenv.Eventually(t, time.Minute, "the burst's surplus to close", func() bool {
		conn := acquire(t, p)
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		steady[conn.Conn().PgConn().PID()] = true
		conn.Release()
		c.Sweep(ctx, p)
		return p.Stat().TotalConns() == 1
	})
	if len(steady) != 1 {
		t.Errorf("the steady user got %d different backends, want 1: the one it used was closed", len(steady))
	}
	if got := c.Closed(); got != 5 {
		t.Errorf("Closed() = %d, want 5", got)
	}
	if got := hooked.Load(); got != 5 {
		t.Errorf("the pool's BeforeClose ran %d times, want 5", got)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.lastUsed) != 1 || len(c.sweeping) != 0 {
		t.Errorf("the Closer still holds %d use records and %d sweep marks, want 1 and 0", len(c.lastUsed), len(c.sweeping))
	}
}

// TestSweepKeepsMinConns: idle connections are closed down to the pool's MinConns, not
// below.
func TestSweepKeepsMinConns(t *testing.T) {
	ctx := context.Background()
	p, c := openPool(t, time.Millisecond, func(cfg *pgxpool.Config) { cfg.MinConns = 2 })
	conns := []*pgxpool.Conn{acquire(t, p), acquire(t, p), acquire(t, p), acquire(t, p)}
	for _, conn := range conns {
		conn.Release()
	}
	testenv.Eventually(t, time.Minute, "the idle connections above MinConns to close", func() bool {
		c.Sweep(ctx, p)
		return p.Stat().TotalConns() == 2
	})
	c.Sweep(ctx, p)
	if got := p.Stat().TotalConns(); got != 2 {
		t.Errorf("%d connections after another sweep, want MinConns (2)", got)
	}
}

// BenchmarkAcquireRelease: what the Closer's use record adds to a pool round trip
// without a statement (acquire, release): run with -bench . and compare the two.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, withCloser := range []bool{false, true} {
		name := "pgxpool"
		if withCloser {
			name = "with-closer"
		}
		b.Run(name, func(b *testing.B) {
			p := testenv.PostgresWith(b, func(cfg *pgxpool.Config) {
				cfg.MaxConns = 4
				if withCloser {
					New(cfg, time.Minute)
				}
			})
			ctx := context.Background()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					conn, err := p.Acquire(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					conn.Release()
				}
			})
		})
	}
}
