package consumer

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/idempotency"
)

// errRollback makes pgx.BeginFunc roll back a duplicate's transaction, which wrote nothing.
var errRollback = errors.New("consumer: rollback")

// Beginner starts a transaction; *pgxpool.Pool and *pgx.Conn satisfy it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// IdempotentConfig configures Idempotent.
type IdempotentConfig struct {
	// DB opens the transactions. Required.
	DB Beginner
	// Store records idempotency keys (default idempotency.NewStore()).
	Store *idempotency.Store
	// Name identifies the handler within its consumer group: the idempotency scope of a
	// message is "<group>/<Name>", its key the event id. Two handlers of one group that
	// must both see every event need different names. Default "handler".
	Name string
	// Fence, when true and the message holds a lease (Lock), checks the lease's fencing
	// token with lock.Lease.CheckFence first in the transaction, so that a holder whose lease
	// expired cannot commit after a newer holder did.
	Fence bool
	// AfterCommit functions run after each commit of a first-time handling, e.g.
	// outbox.Outbox.Wake to wake the relay without serialising commits.
	AfterCommit []func()
}

// Idempotent is the innermost handler of the chain. For each message it opens a
// transaction on DB (pgx.BeginFunc), waits for the lease if Lock is acquiring it ahead
// (Message.AwaitLease), checks the lease's fencing token if Fence is set, claims scope "<group>/<Name>" and key = event id with the request
// hash SHA-256(type, payload) (idempotency.Store), and then:
//   - first time: calls h with the transaction, commits, and runs the AfterCommit hooks;
//   - duplicate: rolls back, records OutcomeDuplicate, and returns nil without calling h;
//   - same id, different payload: fails with idempotency.ErrKeyReused (non-retryable).
//
// An error from h, or from the commit, rolls everything back and is returned as is, so
// Retry and DeadLetter can classify it. Store.Complete is not called: a consumer has no
// response to replay, and skipping it saves a statement per event. The message must be
// decoded (Decode).
func Idempotent(cfg IdempotentConfig, h TxHandler) Handler {
	if cfg.DB == nil || h == nil {
		panic("consumer: Idempotent needs a DB and a handler")
	}
	if cfg.Store == nil {
		cfg.Store = idempotency.NewStore()
	}
	if cfg.Name == "" {
		cfg.Name = "handler"
	}
	pool := newPoolCheck(cfg.DB) // warns when the pool is smaller than the assignment
	return func(ctx context.Context, m *Message) error {
		pool.check(ctx)
		if !m.Decoded {
			return Permanent(errors.New("consumer: Idempotent needs a decoded message; put Decode before it"))
		}
		ev := m.Event
		scope := m.Group + "/" + cfg.Name
		var dup bool
		err := pgx.BeginFunc(ctx, cfg.DB, func(tx pgx.Tx) error {
			// With Lock's AcquireAhead the lease was being acquired while BEGIN ran.
			if err := m.AwaitLease(ctx); err != nil {
				return err
			}
			if cfg.Fence && m.Lease != nil {
				if err := m.Lease.CheckFence(ctx, tx); err != nil {
					return err
				}
			}
			c, err := cfg.Store.Claim(ctx, tx, scope, ev.ID, idempotency.Hash([]byte(ev.Type), ev.Data))
			if err != nil {
				return err
			}
			if c.Duplicate {
				dup = true
				return errRollback
			}
			return h(ctx, tx, ev)
		})
		if dup {
			m.Outcome = OutcomeDuplicate
			return nil
		}
		if err != nil {
			return fmt.Errorf("consumer: handle %s %s: %w", ev.Type, ev.ID, err)
		}
		for _, f := range cfg.AfterCommit {
			f()
		}
		return nil
	}
}
