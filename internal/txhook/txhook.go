// Package txhook lets a library package defer writes to the end of a transaction that
// another package runs, without either knowing the other: the runner (the consumer's
// transactor) creates a Hooks for its transaction, puts it in the handlers' contexts and,
// just before COMMIT, calls Batch (or Run); a writer (the outbox) finds the Hooks with
// For and buffers its rows in a hook of its own. A Queuer hook has its statements queued
// into the batch that Batch returns and the runner sends with the COMMIT
// (internal/pipetx): the deferred writes cost no round trip of their own. A Flusher hook
// writes in a round trip of its own before it. Any other hook is state that the
// transaction's handlers share. Writes made outside such a runner, or on another
// transaction, are not deferred. A writer may also register functions to run once the
// transaction has committed (After): the runner calls Committed after a successful
// COMMIT and never after a rollback or a failed COMMIT.
package txhook

import (
	"context"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
)

// Queuer is a hook whose writes go out with the COMMIT: Queue adds them to b, with
// callbacks that check their results. It queues nothing when it has nothing to write.
type Queuer interface {
	Queue(b *pgx.Batch)
}

// Flusher is a hook whose writes cannot be queued: Flush writes, in tx, what it buffered
// during the transaction.
type Flusher interface {
	Flush(ctx context.Context, tx pgx.Tx) error
}

// Hooks are the hooks of one transaction, in the order they were added.
type Hooks struct {
	tx    pgx.Tx
	keys  []any
	hooks []any
	after []func()
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

// Hook returns the hook added under key, or adds the one newHook returns: a Queuer, a
// Flusher, or state that the transaction's handlers share.
func (h *Hooks) Hook(key any, newHook func() any) any {
	for i, k := range h.keys {
		if k == key {
			return h.hooks[i]
		}
	}
	v := newHook()
	h.keys = append(h.keys, key)
	h.hooks = append(h.hooks, v)
	return v
}

// After adds f to the functions Committed runs. A nil f is not added.
func (h *Hooks) After(f func()) {
	if f != nil {
		h.after = append(h.after, f)
	}
}

// Committed runs the functions After added, in the order they were added, and forgets
// them. The runner calls it once, after the transaction committed; after a rollback or a
// failed COMMIT it must not. Nil Hooks have nothing to run.
func (h *Hooks) Committed() {
	if h == nil {
		return
	}
	after := h.after
	h.after = nil
	for _, f := range after {
		f()
	}
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

// Run writes what every hook buffered, in the order they were added, and stops at the
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
// or before the COMMIT; a Flusher first sends the statements queued so far and then
// flushes, and a Checker whose Checked is true sends them, its own included.
func (h *Hooks) Batch(ctx context.Context) (*pgx.Batch, error) {
	b := &pgx.Batch{}
	if h == nil {
		return b, nil
	}
	send := func() error {
		if b.Len() == 0 {
			return nil
		}
		err := h.tx.SendBatch(ctx, b).Close()
		b = &pgx.Batch{}
		if err != nil {
			return fmt.Errorf("before commit: %w", err)
		}
		return nil
	}
	for _, v := range h.hooks {
		switch v := v.(type) {
		case Queuer:
			v.Queue(b)
			if c, ok := v.(Checker); ok && c.Checked() {
				if err := send(); err != nil {
					return nil, err
				}
			}
		case Flusher:
			if err := send(); err != nil {
				return nil, err
			}
			if err := v.Flush(ctx, h.tx); err != nil {
				return nil, fmt.Errorf("before commit: %w", err)
			}
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
