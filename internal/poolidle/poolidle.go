// Package poolidle closes the connections of a pgxpool.Pool that nothing used for an idle
// time, and leaves the pool handing out its most recently used connection first.
//
// pgxpool closes idle connections in its health check, which takes every idle connection
// and gives them back in the order it took them: the least recently used end up first in
// line. Under a load with bursts, the next burst then uses the coldest connections, so at
// every check (every 15 s in choreo's services) connections that were about to be closed
// are used again, and a pool keeps what its largest burst opened as long as bursts come
// more often than the idle time (measured in the order service's 25-minute soak at 157
// orders/s: 4 connections closed while its pool grew from 22 to its cap of 60, most of
// them idle at any moment). A Closer gives the connections it keeps back least recently
// used first, so the hot ones stay in front and only a burst's surplus goes cold and is
// closed.
package poolidle

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Closer records when each connection of a pool was last given back, and closes those
// idle longer than its idle time (see Run).
type Closer struct {
	idle        time.Duration
	beforeClose func(*pgx.Conn) // the pool's BeforeClose hook before New chained to it
	closed      atomic.Int64

	mu       sync.Mutex
	lastUsed map[*pgx.Conn]time.Time
	sweeping map[*pgx.Conn]bool // given back by the Closer itself: not a use
}

// New returns a Closer of the connections idle longer than idle, and sets cfg up for it:
// it chains a release tracer to cfg.ConnConfig.Tracer and a hook to cfg.BeforeClose (which
// also runs before the Closer closes a connection), and
// turns pgxpool's own idle closing off (MaxConnIdleTime and HealthCheckPeriod an hour, so
// that its health check no longer reorders the idle connections every few seconds; the
// check still closes connections past their lifetime, which Release does too). Open the
// pool with cfg, then call Run. cfg.MinConns is kept open, as pgxpool would.
func New(cfg *pgxpool.Config, idle time.Duration) *Closer {
	c := &Closer{idle: idle, lastUsed: map[*pgx.Conn]time.Time{}, sweeping: map[*pgx.Conn]bool{}}
	if prev := cfg.ConnConfig.Tracer; prev != nil {
		cfg.ConnConfig.Tracer = multitracer.New(prev, c)
	} else {
		cfg.ConnConfig.Tracer = c
	}
	c.beforeClose = cfg.BeforeClose
	cfg.BeforeClose = func(conn *pgx.Conn) {
		c.mu.Lock()
		delete(c.lastUsed, conn)
		delete(c.sweeping, conn)
		c.mu.Unlock()
		if c.beforeClose != nil {
			c.beforeClose(conn)
		}
	}
	cfg.MaxConnIdleTime, cfg.HealthCheckPeriod = time.Hour, time.Hour
	return c
}

// TraceQueryStart is part of pgx.QueryTracer, which a pgx.ConnConfig.Tracer must be; the
// Closer traces only releases (pgxpool.ReleaseTracer).
func (c *Closer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd is part of pgx.QueryTracer (see TraceQueryStart).
func (c *Closer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceRelease records that conn was used (pgxpool.ReleaseTracer).
func (c *Closer) TraceRelease(_ *pgxpool.Pool, d pgxpool.TraceReleaseData) {
	now := time.Now()
	c.mu.Lock()
	if c.sweeping[d.Conn] {
		delete(c.sweeping, d.Conn)
	} else {
		c.lastUsed[d.Conn] = now
	}
	c.mu.Unlock()
}

// Run calls Sweep every period until ctx ends.
func (c *Closer) Run(ctx context.Context, pool *pgxpool.Pool, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Sweep(ctx, pool)
		}
	}
}

// Sweep closes the pool's idle connections unused for the idle time (keeping
// MinConns), and gives the others back least recently used first, so that the most
// recently used is handed out next. It returns how many it closed.
//
// A connection to close is taken out of the pool (Hijack) and closed, rather than
// destroyed through Release: a destroy makes pgxpool run its health check, which would
// reorder the idle connections again.
func (c *Closer) Sweep(ctx context.Context, pool *pgxpool.Pool) int {
	total := int(pool.Stat().TotalConns())
	minConns := int(pool.Config().MinConns)
	conns := pool.AcquireAllIdle(ctx) // the most recently used first
	now := time.Now()
	var drop []*pgx.Conn
	keep := conns[:0]
	c.mu.Lock()
	for _, pc := range conns {
		conn := pc.Conn()
		last, seen := c.lastUsed[conn]
		if !seen { // opened by the pool itself and never handed out: idle from now
			c.lastUsed[conn], last = now, now
		}
		if now.Sub(last) > c.idle && total-len(drop) > minConns {
			delete(c.lastUsed, conn)
			drop = append(drop, pc.Hijack())
			continue
		}
		c.sweeping[conn] = true
		keep = append(keep, pc)
	}
	c.mu.Unlock()
	for i := len(keep) - 1; i >= 0; i-- {
		keep[i].Release()
	}
	for _, conn := range drop {
		if c.beforeClose != nil {
			c.beforeClose(conn)
		}
		_ = conn.Close(ctx)
	}
	c.closed.Add(int64(len(drop)))
	return len(drop)
}

// Closed is how many connections the Closer has closed.
func (c *Closer) Closed() int64 { return c.closed.Load() }
