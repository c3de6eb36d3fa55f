package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/internal/fence"
	"github.com/choreo-saga/choreo/internal/pipetx"
	"github.com/choreo-saga/choreo/internal/txhook"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
)

// errRollback makes pipetx.Run roll back a duplicate's transaction, which wrote nothing.
var errRollback = errors.New("consumer: rollback")

// IdempotentConfig configures Idempotent.
type IdempotentConfig struct {
	// DB opens the transactions. Required.
	DB migrate.Beginner
	// Store records idempotency keys (default idempotency.NewStore()).
	Store *idempotency.Store
	// Name identifies the handler within its consumer group: the idempotency scope of a
	// message is "<group>/<Name>", its key the event id. Two handlers of one group that
	// must both see every event need different names. Default "handler".
	Name string
	// Fence, when true and the message holds a lease (Lock), checks the lease's fencing
	// token first in the transaction, as lock.Lease.CheckFence does and in the same round
	// trip as the idempotency claim, so that a holder whose lease expired cannot commit
	// after a newer holder did (lock.ErrStaleToken).
	Fence bool
	// AfterCommit functions run after each commit of a first-time handling, e.g.
	// outbox.Outbox.Wake to wake the relay without serialising commits.
	AfterCommit []func()
}

// Idempotent is the innermost handler of the chain. For each message it opens a
// transaction on DB, checks the fencing token of the lease Lock holds if Fence is set,
// claims scope "<group>/<Name>" and key = event id with the request hash SHA-256(type,
// payload), of the payload as received before any Upcast (idempotency.Store), and then:
//   - first time: calls h with the transaction, writes what h deferred to the commit
//     (outbox.Outbox.Enqueue's rows, in one INSERT), commits, and runs the AfterCommit
//     hooks;
//   - duplicate: rolls back, records OutcomeDuplicate, and returns nil without calling h;
//   - same id, different payload: fails with idempotency.ErrKeyReused (non-retryable).
//
// An error from h, or from the commit, rolls everything back and is returned as is, so
// Retry and DeadLetter can classify it. Store.Complete is not called: a consumer has no
// response to replay, and skipping it saves a statement per event. The message must be
// decoded (Decode).
//
// When DB is a *pgxpool.Pool or a *pgx.Conn, the BEGIN is sent with the fence check and
// the claim, and the COMMIT with the deferred writes: no round trip of their own. The
// transaction h gets is then not pgx's own type; it implements pgx.Tx, and h must not
// commit or roll it back (no handler may). On any other DB (a pgx.Tx: a savepoint) the
// transaction begins and commits as pgx.BeginFunc does.
//
// A nil DB or handler is an error matching ErrInvalidConfig.
func Idempotent(cfg IdempotentConfig, h TxHandler) (Handler, error) {
	if cfg.DB == nil || h == nil {
		return nil, fmt.Errorf("%w: Idempotent needs a DB and a handler", ErrInvalidConfig)
	}
	t, err := cfg.resolve(h)
	if err != nil {
		return nil, err
	}
	return t.handle, nil
}

// defaultHandlerName is the default IdempotentConfig.Name and StandardConfig.Name.
const defaultHandlerName = "handler"

// transactor is Idempotent's configuration with its defaults applied: the transaction in
// which one record (Idempotent) or a batch (StandardBatch) is claimed and handled.
type transactor struct {
	db          migrate.Beginner
	store       *idempotency.Store
	name        string
	fence       bool
	afterCommit []func()
	h           TxHandler
	pool        *poolCheck // warns when the pool is smaller than the assignment
}

func (cfg IdempotentConfig) resolve(h TxHandler) (*transactor, error) {
	t := &transactor{db: cfg.DB, store: cfg.Store, name: cfg.Name, fence: cfg.Fence, afterCommit: cfg.AfterCommit, h: h,
		pool: newPoolCheck(cfg.DB)}
	if t.store == nil {
		var err error
		if t.store, err = idempotency.NewStore(); err != nil {
			return nil, err
		}
	}
	if t.name == "" {
		t.name = defaultHandlerName
	}
	return t, nil
}

// handle is the Idempotent handler.
func (t *transactor) handle(ctx context.Context, m *Message) error {
	if !m.Decoded {
		return Permanent(errors.New("consumer: Idempotent needs a decoded message; put Decode before it"))
	}
	return t.run(ctx, []*Message{m}, nil, nil)
}

// run claims and handles ms, decoded records of one group in offset order, in one
// transaction on t.db. In the transaction it checks the fencing tokens of the distinct
// leases, in entity order, in one statement (if fence; held lists them sorted by entity
// when the caller knows them, else they are collected from ms), sent in one round trip
// with the statement that claims every event's key under the scope "<group>/<name>"
// (idempotency.Store.Claim for one record, ClaimAll for several: a copy of an event
// within ms is a duplicate of it), and calls h, in order, for every event that is
// not a duplicate, with ctxs[i] as its context (ctx when ctxs is nil); ctx carries the
// transaction's own statements. Each handler's context carries the transaction's
// before-commit hooks (internal/txhook), which run after the last handler: the outbox
// rows the handlers enqueued are written there in one INSERT. Then it commits, marks the duplicates with
// OutcomeDuplicate and runs the functions the handlers registered with AfterCommit and
// the configured AfterCommit hooks once. When every event is a duplicate
// the transaction, which wrote nothing, is rolled back and no hook runs. A Reject from
// the handler of a single record commits the handler's writes as success does, is
// recorded as the idempotency record's response, and is then returned; a redelivery of
// that record returns it again (so that DeadLetter produces the copy a failed produce
// missed) and a batch holding it is handled one record at a time. An error rolls
// everything back; it names the event whose handler failed, or the record when ms holds
// one.
func (t *transactor) run(ctx context.Context, ms []*Message, ctxs []context.Context, held []*lock.Lease) error {
	var (
		dup     []bool
		fresh   int
		failed  = -1
		hooks   *txhook.Hooks
		refusal error // a Reject of the one record: committed, then returned
		again   error // the stored Reject of the one record, a duplicate
	)
	t.pool.check(ctx)
	err := pipetx.Run(ctx, t.db, func(tx *pipetx.Tx) (*pgx.Batch, error) {
		hooks = txhook.New(tx) // writes deferred to the commit (outbox rows), effects after it
		cctx := ctx
		if t.fence {
			// The fence check of every lease leads the claim: one statement, one
			// round trip with it.
			st, err := fenceStmt(ms, held)
			if err != nil {
				return nil, err
			}
			if st != nil {
				cctx = txhook.WithLeading(ctx, *st)
			}
		}
		var (
			err     error
			refused []error
		)
		if dup, refused, err = t.claim(cctx, tx, ms); err != nil {
			return nil, err
		}
		for i, r := range refused {
			switch {
			case r == nil:
			case len(ms) == 1:
				again = r // refused before: dead-letter it again (its copy may be missing)
			default:
				return nil, fmt.Errorf("consumer: event %s was refused before; handling the batch's records one at a time", ms[i].Event.ID)
			}
		}
		for i, m := range ms {
			if dup[i] {
				continue
			}
			fresh++
			hctx := ctx
			if ctxs != nil {
				hctx = ctxs[i]
			}
			if err := t.h(txhook.With(hctx, hooks), tx, m.Event); err != nil {
				if _, ok := rejected(err); ok && len(ms) == 1 {
					refusal = err // the refusal's writes commit
					break
				}
				failed = i
				return nil, err
			}
		}
		if fresh == 0 {
			return nil, errRollback
		}
		if refusal != nil {
			// A redelivery finds the refusal with the claim and refuses again.
			m := ms[0]
			if err := t.store.Complete(ctx, tx, m.Group+"/"+t.name, m.Event.ID, encodeRefusal(refusal)); err != nil {
				return nil, err
			}
		}
		// Writes deferred by the handlers (outbox.Enqueue: one multi-row insert for
		// the whole transaction), after every handler, sent with the commit.
		return hooks.Batch(ctx)
	})
	switch {
	case again != nil && errors.Is(err, errRollback):
		return handleErr(ms[0], again)
	case err == nil || (fresh == 0 && errors.Is(err, errRollback)):
	case failed >= 0:
		return handleErr(ms[failed], err)
	case len(ms) == 1:
		return handleErr(ms[0], err)
	default:
		return fmt.Errorf("consumer: handle %d events from offset %d: %w", len(ms), ms[0].Record.Offset, err)
	}
	for i, m := range ms {
		if dup[i] {
			m.Outcome = OutcomeDuplicate
		}
	}
	if fresh > 0 {
		hooks.Committed() // the handlers' AfterCommit effects
		for _, f := range t.afterCommit {
			f()
		}
	}
	if refusal != nil {
		return handleErr(ms[0], refusal)
	}
	return nil
}

func handleErr(m *Message, err error) error {
	return fmt.Errorf("consumer: handle %s %s: %w", m.Event.Type, m.Event.ID, err)
}

// fenceStmt returns the fence check of the leases held for ms (held, sorted by entity,
// or if held is nil the distinct leases the messages hold, sorted here) as one statement
// to lead the idempotency claim (txhook.WithLeading): internal/fence's check, which
// lock.Lease.CheckFence runs for one lease, with the same errors (one lease is its
// one-entity case, which has a statement of its own). It returns nil when no
// lease is held, and first fails with a lease's error if the lease is already known to
// be lost.
func fenceStmt(ms []*Message, held []*lock.Lease) (*txhook.Stmt, error) {
	if held == nil {
		for _, m := range ms {
			if m.lease != nil && !slices.Contains(held, m.lease) {
				held = append(held, m.lease)
			}
		}
		if len(held) > 1 {
			slices.SortFunc(held, func(a, b *lock.Lease) int { return strings.Compare(a.Entity(), b.Entity()) })
		}
	}
	if len(held) == 0 {
		return nil, nil
	}
	c := fence.Check{Entities: make([]string, len(held)), Tokens: make([]int64, len(held))}
	for i, lease := range held {
		if err := lease.Err(); err != nil {
			return nil, err
		}
		c.Entities[i], c.Tokens[i] = lease.Key(), lease.Token()
	}
	sql, args := c.Statement()
	return &txhook.Stmt{SQL: sql, Args: args, Row: c.Scan}, nil
}

// claim claims the events of ms and reports which are duplicates.
// claim claims the events of ms and reports which are duplicates and, of those, which
// were refused (Reject) when they were handled: the stored refusal.
func (t *transactor) claim(ctx context.Context, tx pgx.Tx, ms []*Message) ([]bool, []error, error) {
	scope := ms[0].Group + "/" + t.name
	var claims []idempotency.Claim
	if len(ms) == 1 {
		c, err := t.store.Claim(ctx, tx, scope, ms[0].Event.ID, ms[0].requestHash())
		if err != nil {
			return nil, nil, err
		}
		claims = []idempotency.Claim{c}
	} else {
		reqs := make([]idempotency.Request, len(ms))
		for i, m := range ms {
			reqs[i] = idempotency.Request{Key: m.Event.ID, Hash: m.requestHash()}
		}
		var err error
		if claims, err = t.store.ClaimAll(ctx, tx, scope, reqs); err != nil {
			return nil, nil, err
		}
	}
	dup := make([]bool, len(ms))
	refused := make([]error, len(ms))
	for i, c := range claims {
		dup[i] = c.Duplicate
		if c.Duplicate {
			refused[i] = decodeRefusal(c.Response)
		}
	}
	return dup, refused, nil
}

// refusalPrefix starts the idempotency response that records a Reject.
const refusalPrefix = "consumer.Reject\n"

// encodeRefusal is the idempotency response that records refusal (a Reject): its
// reason and its error text, at most MaxDLQErrorBytes.
func encodeRefusal(refusal error) []byte {
	reason, _ := rejected(refusal)
	text := refusal.Error()
	if len(text) > MaxDLQErrorBytes {
		text = text[:MaxDLQErrorBytes]
	}
	return []byte(refusalPrefix + reason + "\n" + text)
}

// decodeRefusal returns the Reject that response records, or nil.
func decodeRefusal(response []byte) error {
	rest, ok := strings.CutPrefix(string(response), refusalPrefix)
	if !ok {
		return nil
	}
	reason, text, _ := strings.Cut(rest, "\n")
	return Reject(reason, errors.New(text))
}
