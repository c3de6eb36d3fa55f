// Package txhook lets a library package defer writes to the end of a transaction that
// another package runs, without either knowing the other: the runner (the consumer's
// transactor) creates a Hooks for its transaction, puts it in the handlers' contexts and
// calls Run just before COMMIT; a writer (the outbox) finds it with For and buffers its
// rows in a Flusher of its own, which Run then writes in one statement. Writes made
// outside such a runner, or on another transaction, are not deferred. A Flusher that is
// also a Queuer has its statements queued into the batch Run returns, which the runner
// sends with the COMMIT (internal/pipetx): the deferred writes then cost no round trip
// of their own.
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

// Queuer is a Flusher whose writes can go out with the COMMIT: Queue adds them to b, with
// callbacks that check their results. It queues nothing when it has nothing to write.
type Queuer interface {
	Flusher
	Queue(b *pgx.Batch)
}

// Checker is a Queuer whose statements may have callbacks that fail on results the
// server accepted (a row count, a value read): the COMMIT goes out in the same pipeline
// as the statements queued with it, so by the time such a callback runs the server has
// already committed. When Checked reports true, Batch sends the statements queued so
// far, the Checker's own included, in a round trip before the COMMIT's, so that a
// callback's error still rolls the transaction back.
type Checker interface {
	Queuer
	Checked() bool
}

// Run writes what every Flusher buffered, in the order they were added, and stops at the
// first error. Nil Hooks have nothing to write.
func (h *Hooks) Run(ctx context.Context) error {
	b, err := h.Batch(ctx)
	if err != nil || b.Len() == 0 {
		return err
	}
	return h.tx.SendBatch(ctx, b).Close()
}

// Batch is Run for a runner that sends the COMMIT in a batch: a Queuer's statements are
// queued into the returned batch, which the caller must send, in the transaction, with
// or before the COMMIT; any other Flusher first sends the statements queued so far and
// then flushes, and a Checker whose Checked is true sends them, its own included.
func (h *Hooks) Batch(ctx context.Context) (*pgx.Batch, error) {
	b := &pgx.Batch{}
	if h == nil {
		return b, nil
	}
	for _, f := range h.fs {
		if q, ok := f.(Queuer); ok {
			q.Queue(b)
			if c, ok := q.(Checker); ok && c.Checked() && b.Len() > 0 {
				if err := h.tx.SendBatch(ctx, b).Close(); err != nil {
					return nil, fmt.Errorf("before commit: %w", err)
				}
				b = &pgx.Batch{}
			}
			continue
		}
		if b.Len() > 0 {
			if err := h.tx.SendBatch(ctx, b).Close(); err != nil {
				return nil, fmt.Errorf("before commit: %w", err)
			}
			b = &pgx.Batch{}
		}
		if err := f.Flush(ctx, h.tx); err != nil {
			return nil, fmt.Errorf("before commit: %w", err)
		}
	}
	return b, nil
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
