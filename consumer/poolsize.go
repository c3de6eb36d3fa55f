package consumer

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/migrate"
)

// poolCheckInterval is how often a handler chain looks again at how many partitions its
// consumer owns; a new assignment is noticed at its first record after this much time.
const poolCheckInterval = time.Second

// msgPoolTooSmall starts the Warn line of poolCheck.
const msgPoolTooSmall = "consumer: Postgres pool smaller than the partitions this member owns"

// runtimeKey is the context key under which Run exposes the running Consumer to its
// handlers (see runtimeFrom).
type runtimeKey struct{}

// runtimeFrom returns the Consumer whose worker is handling ctx's message, or nil outside
// the runtime.
func runtimeFrom(ctx context.Context) *Consumer {
	c, _ := ctx.Value(runtimeKey{}).(*Consumer)
	return c
}

// poolCheck checks at run time what the embedding guide asks users to remember: every
// partition worker holds one Postgres connection while its transaction runs, so a
// *pgxpool.Pool with fewer connections (MaxConns) than the partitions one member owns
// makes handlers queue for connections, while holding their entity's lease. It logs at
// Warn once per assignment that is too large (naming both numbers and what to do); the
// handlers still run.
type poolCheck struct {
	maxConns int
	next     atomic.Int64 // Unix ns of the next look at the assignment
	warned   atomic.Int64 // partition count last warned about; 0: none
}

// newPoolCheck returns the check for db, or nil (no check) when db is not a pgxpool.
func newPoolCheck(db migrate.Beginner) *poolCheck {
	p, ok := db.(*pgxpool.Pool)
	if !ok || p == nil {
		return nil
	}
	return &poolCheck{maxConns: int(p.Config().MaxConns)}
}

// check compares the pool's size with the partitions the consumer running ctx's handler
// owns, at most once per poolCheckInterval. It costs a clock read and an atomic load
// otherwise.
func (pc *poolCheck) check(ctx context.Context) {
	if pc == nil {
		return
	}
	now := time.Now().UnixNano()
	next := pc.next.Load()
	if now < next || !pc.next.CompareAndSwap(next, now+int64(poolCheckInterval)) {
		return
	}
	c := runtimeFrom(ctx)
	if c == nil {
		return
	}
	n, _ := c.Assigned()
	if n <= pc.maxConns {
		pc.warned.Store(0)
		return
	}
	if pc.warned.Swap(int64(n)) == int64(n) {
		return // already reported for this assignment
	}
	c.cfg.logger.LogAttrs(ctx, slog.LevelWarn,
		msgPoolTooSmall+": handlers will wait for connections; set the pool's MaxConns (pool_max_conns in the DSN) to at least the partitions one member may own plus what else uses the pool",
		slog.String("group", c.group), slog.Int("partitions", n), slog.Int("pool_max_conns", pc.maxConns))
}
