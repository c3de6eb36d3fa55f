// Package txhook lets a library package defer writes to the end of a transaction that
// another package runs, without either knowing the other: the runner (the consumer's
// transactor) creates a Hooks for its transaction, puts it in the handlers' contexts and
// calls Run just before COMMIT; a writer (the outbox) finds it with For and buffers its
// rows in a Flusher of its own, which Run then writes in one statement. Writes made
// outside such a runner, or on another transaction, are not deferred.
package txhook

import (
	"context"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
)

// Flusher writes, in tx, what it buffered during the transaction.
type Flusher interface {
	Flush(ctx context.Context, tx pgx.Tx) error
}

// Hooks are the Flushers of one transaction, in the order they were added.
type Hooks struct {
	tx   pgx.Tx
	keys []any
	fs   []Flusher
}

// New returns the Hooks of tx, or nil if tx's type cannot be compared (For could not
// tell tx from another transaction): writes are then made at once.
func New(tx pgx.Tx) *Hooks {
	if tx == nil || !reflect.TypeOf(tx).Comparable() {
		return nil
	}
	return &Hooks{tx: tx}
}

type ctxKey struct{}

// With returns ctx carrying h (ctx itself if h is nil).
func With(ctx context.Context, h *Hooks) context.Context {
	if h == nil {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, h)
}

// For returns the Hooks ctx carries if they are tx's, else nil: writes on any other
// transaction (another database, a nested transaction) are made at once.
func For(ctx context.Context, tx pgx.Tx) *Hooks {
	h, _ := ctx.Value(ctxKey{}).(*Hooks)
	if h == nil || h.tx != tx {
		return nil
	}
	return h
}

// Flusher returns the Flusher added under key, or adds the one newF returns.
func (h *Hooks) Flusher(key any, newF func() Flusher) Flusher {
	for i, k := range h.keys {
		if k == key {
			return h.fs[i]
		}
	}
	f := newF()
	h.keys = append(h.keys, key)
	h.fs = append(h.fs, f)
	return f
}

// Run flushes every Flusher, in the order they were added, and stops at the first error.
// Nil Hooks have nothing to flush.
func (h *Hooks) Run(ctx context.Context) error {
	if h == nil {
		return nil
	}
	for _, f := range h.fs {
		if err := f.Flush(ctx, h.tx); err != nil {
			return fmt.Errorf("before commit: %w", err)
		}
	}
	return nil
}

// Stmt is a statement that a runner wants sent in the same round trip as the next
// statement a writer sends (see WithLeading).
type Stmt struct {
	SQL  string
	Args []any
	// Row reads the statement's row; its error fails the writer's call.
	Row func(row pgx.Row) error
}

type leadingKey struct{}

// WithLeading returns ctx carrying stmts: a writer that supports it (idempotency's Claim)
// queues them before its own statement in one pgx batch, one round trip instead of two.
func WithLeading(ctx context.Context, stmts ...Stmt) context.Context {
	return context.WithValue(ctx, leadingKey{}, stmts)
}

// Leading returns the statements WithLeading put in ctx.
func Leading(ctx context.Context) []Stmt {
	s, _ := ctx.Value(leadingKey{}).([]Stmt)
	return s
}
