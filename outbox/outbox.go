package outbox

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/pipetx"
	"github.com/choreo-saga/choreo/internal/txhook"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/tracing"
)

// Outbox is the writing side: it stores events in the caller's transaction and
// wakes the relay after the commit. It is safe for concurrent use; create one
// per outbox table and share it (also with the [Relay], via [NewRelay]).
type Outbox struct {
	names    names
	notifier migrate.Execer // sends NOTIFY after commit when no in-process leader exists
	signer   *event.Signer  // see WithSigner (signer.go)

	// leaderWake is the wake channel of an in-process relay while it leads.
	leaderWake atomic.Pointer[chan struct{}]

	mu        sync.Mutex // guards the fields below
	notifying bool       // a NOTIFY goroutine is running
	dirty     bool       // Wake was called while it ran: send one more
	lastSent  time.Time  // the last NOTIFY sent, or queued in a writer's transaction
	// ownWake is when the result of a NOTIFY queued in a writer's transaction was read
	// (as its COMMIT ran, or just before): the Wake that follows that commit (the
	// writer's own, just after) needs no NOTIFY of its own.
	ownWake time.Time
}

// Option configures an Outbox (New). An invalid value makes New return an error
// wrapping [ErrInvalidConfig].
type Option func(*config) error

// config is what the options of New set.
type config struct {
	names    names
	notifier migrate.Execer
	signer   *event.Signer
}

// WithTable sets the outbox table name: a lower-case identifier, optionally
// schema-qualified ("billing.outbox"). The dead-letter table is the same name
// with "_dead" appended, and the NOTIFY channel is the table name. Default
// [DefaultTable] ("choreo_outbox"). An invalid name makes [New] return an
// error wrapping [ErrInvalidTable].
func WithTable(name string) Option {
	return func(c *config) error {
		n, err := newNames(name)
		c.names = n
		return err
	}
}

// WithNotifier sets the database Wake uses to send a NOTIFY on the outbox channel
// when no relay leads in this process (for example in a service whose relay
// runs elsewhere, or a second instance of a service whose relay leads in the
// first). NOTIFYs are coalesced: at most one is in flight per Outbox, any number
// of Wake calls during it add one more, and two NOTIFYs are at least
// [NotifySpacing] apart (the first after a quiet spell goes at once). Each NOTIFY
// is a transaction of its own, with a transaction id and a commit record, except the
// first after a quiet spell when the rows go out with the COMMIT (a consumer's
// transaction, [Outbox.InTx], an [Outbox.Queue] batch): that one is queued with them
// and Postgres delivers it at their commit.
// Default: none, so without an in-process leader the relay finds the rows at its
// next poll.
func WithNotifier(db migrate.Execer) Option {
	return func(c *config) error {
		if db == nil {
			return fmt.Errorf("%w: nil notifier", ErrInvalidConfig)
		}
		c.notifier = db
		return nil
	}
}

// New returns an Outbox for the default table, changed by opts, applied in order.
// It returns the first option's error: one wrapping [ErrInvalidTable] for an
// invalid [WithTable] name, [ErrInvalidConfig] for another invalid value.
func New(opts ...Option) (*Outbox, error) {
	n, _ := newNames(DefaultTable)
	c := config{names: n}
	for _, opt := range opts {
		if err := opt(&c); err != nil {
			return nil, err
		}
	}
	return &Outbox{names: c.names, notifier: c.notifier, signer: c.signer}, nil
}

// TableName returns the outbox table's name.
func (o *Outbox) TableName() string { return o.names.table }

// Enqueue stores evs for topic in tx, in order. Each row keeps the Kafka record
// the relay will produce: key = the event's subject, value = its payload, the
// CloudEvents headers, and the W3C trace context of ctx's current span, so the
// trace continues through the relay. Every event is validated first; an
// invalid one fails the call (the error matches event.ErrMalformed) and
// nothing is stored.
//
// Write the entity's rows before enqueueing its events, in the same
// transaction: per-key order relies on it (see the package documentation).
// After tx commits, call [Outbox.Wake] (or use [Outbox.InTx], which does).
//
// In a transaction run by the consumer package (consumer.Idempotent, Standard,
// StandardBatch) or by [Outbox.InTx], when ctx is the handler's (fn's) context and
// tx its transaction, the rows are not inserted at once: every Enqueue of the
// transaction (of every handler of a batch) is buffered and written in one
// multi-row INSERT with the commit, after all the handlers' own writes, with ids in
// the order of the calls. Validation errors are still returned by Enqueue; an
// insert error fails the commit.
func (o *Outbox) Enqueue(ctx context.Context, tx pgx.Tx, topic string, evs ...event.Event) error {
	if len(evs) == 0 {
		return nil
	}
	keys, headers, payloads, err := encodeRows(ctx, o.signer, topic, evs)
	if err != nil {
		return err
	}
	if hooks := txhook.For(ctx, tx); hooks != nil {
		p := hooks.Hook(flushKey(o.names.table), func() any { return &pending{o: o, table: o.names.table} }).(*pending)
		for range evs {
			p.topics = append(p.topics, topic)
		}
		p.keys = append(p.keys, keys...)
		p.headers = append(p.headers, headers...)
		p.payloads = append(p.payloads, payloads...)
		return nil
	}
	sql, args := o.insert(topic, keys, headers, payloads)
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("outbox: enqueue into %s: %w", o.names.table, err)
	}
	return nil
}

// Queue adds the insert of evs for topic to b, in order, with the same rows and
// validation as [Outbox.Enqueue]: the rows are written when b is sent, with b's other
// statements and in their transaction. A batch sent outside an explicit transaction
// (pgxpool.Pool.SendBatch, pgx.Conn.SendBatch) runs in one implicit transaction, so
// an entity's rows and its events commit together in a single round trip: queue the
// entity's writes first, then its events. After the batch succeeded, call
// [Outbox.Wake]. An error from the insert is returned by the batch's Close.
func (o *Outbox) Queue(ctx context.Context, b *pgx.Batch, topic string, evs ...event.Event) error {
	if len(evs) == 0 {
		return nil
	}
	keys, headers, payloads, err := encodeRows(ctx, o.signer, topic, evs)
	if err != nil {
		return err
	}
	sql, args := o.insert(topic, keys, headers, payloads)
	table := o.names.table
	b.Queue(sql, args...).Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("outbox: enqueue into %s: %w", table, err)
		}
		return nil
	}
	o.queueNotify(b)
	return nil
}

// encodeRows validates evs and turns them into the outbox rows' keys, headers (with
// the trace context of ctx, and s's signature when s is not nil) and payloads.
func encodeRows(ctx context.Context, s *event.Signer, topic string, evs []event.Event) (keys, headers []string, payloads [][]byte, err error) {
	keys = make([]string, len(evs))
	headers = make([]string, len(evs))
	payloads = make([][]byte, len(evs))
	for i, ev := range evs {
		rec, err := event.ToRecord(topic, ev)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("outbox: enqueue %s: %w", ev.Type, err)
		}
		if s != nil {
			s.Sign(rec)
		}
		tracing.Inject(ctx, rec)
		h, err := encodeHeaders(rec.Headers)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("outbox: enqueue %s: %w", ev.Type, err)
		}
		keys[i], headers[i], payloads[i] = string(rec.Key), h, rec.Value
	}
	return keys, headers, payloads, nil
}

// insert is the statement that inserts the rows of one topic, in order.
func (o *Outbox) insert(topic string, keys, headers []string, payloads [][]byte) (string, []any) {
	if len(keys) == 1 {
		return "INSERT INTO " + o.names.table + " (topic, key, headers, payload) VALUES ($1, $2, $3::jsonb, $4)",
			[]any{topic, keys[0], headers[0], payloads[0]}
	}
	return "INSERT INTO " + o.names.table + " (topic, key, headers, payload) " +
			"SELECT $1, k, h::jsonb, p FROM unnest($2::text[], $3::text[], $4::bytea[]) WITH ORDINALITY AS u(k, h, p, n) ORDER BY n",
		[]any{topic, keys, headers, payloads}
}

type flushKey string

// pending are the rows enqueued into one table during a transaction run by the
// consumer, written by Flush just before its commit.
type pending struct {
	o                     *Outbox
	table                 string
	topics, keys, headers []string
	payloads              [][]byte
}

// Queue adds the insert of the pending rows, ids in the order they were enqueued, to b
// (txhook.Queuer), so that the runner sends the rows with the transaction's COMMIT.
func (p *pending) Queue(b *pgx.Batch) {
	var qq *pgx.QueuedQuery
	switch len(p.keys) {
	case 0:
		return
	case 1:
		qq = b.Queue("INSERT INTO "+p.table+" (topic, key, headers, payload) VALUES ($1, $2, $3::jsonb, $4)",
			p.topics[0], p.keys[0], p.headers[0], p.payloads[0])
	default:
		qq = b.Queue("INSERT INTO "+p.table+" (topic, key, headers, payload) "+
			"SELECT t, k, h::jsonb, p FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[]) WITH ORDINALITY AS u(t, k, h, p, n) ORDER BY n",
			p.topics, p.keys, p.headers, p.payloads)
	}
	n, table := len(p.keys), p.table
	qq.Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("outbox: enqueue %d rows into %s: %w", n, table, err)
		}
		return nil
	}
	p.o.queueNotify(b)
}

// queueNotify adds a NOTIFY to b, the batch that carries a writer's rows and its
// transaction's COMMIT, when Wake would send one now (no relay leads in this process, a
// notifier is set, none was sent in the last NotifySpacing and none is on its way): it
// costs the writer neither a round trip nor a transaction of its own, and Postgres
// delivers it when the rows commit. The Wake after that commit then sends nothing; a
// transaction that fails delivers nothing, and the Wakes of others send their own as
// usual.
func (o *Outbox) queueNotify(b *pgx.Batch) {
	if o.notifier == nil || o.leaderWake.Load() != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.notifying || time.Since(o.lastSent) < NotifySpacing {
		return
	}
	o.lastSent = time.Now()
	b.Queue("SELECT pg_notify($1, '')", o.names.channel).Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err // the transaction failed: nothing was delivered
		}
		o.mu.Lock()
		o.ownWake = time.Now()
		o.mu.Unlock()
		return nil
	}
}

// InTx runs fn in a transaction on db (like pgx.BeginFunc) and, once the
// transaction has committed, calls [Outbox.Wake]. fn enqueues with o.Enqueue, with
// the ctx it is given: the rows are then written in one INSERT with the COMMIT, as in a
// consumer's transaction. On a *pgxpool.Pool or *pgx.Conn the transaction spends no
// round trip on BEGIN (it goes with fn's first statement) or COMMIT (it goes with the
// rows), so tx is not pgx's own type; use it through pgx.Tx and do not commit or roll it
// back. If fn returns an error or panics, nothing is written. Functions fn registers
// with consumer.AfterCommit (on ctx and tx) run once the transaction has committed,
// and never when it did not.
func (o *Outbox) InTx(ctx context.Context, db migrate.Beginner, fn func(ctx context.Context, tx pgx.Tx) error) error {
	var hooks *txhook.Hooks
	err := pipetx.Run(ctx, db, func(tx *pipetx.Tx) (*pgx.Batch, error) {
		hooks = txhook.New(tx)
		if err := fn(txhook.With(ctx, hooks), tx); err != nil {
			return nil, err
		}
		return hooks.Batch(ctx)
	})
	if err != nil {
		return err
	}
	hooks.Committed() // fn's consumer.AfterCommit effects
	o.Wake()
	return nil
}

// Wake tells the relay that committed rows are waiting. Call it after COMMIT,
// never inside the transaction: it costs nothing on the commit path. When a
// relay of this Outbox (see [NewRelay]) leads in this process, it is woken in
// memory at once; otherwise, if a [WithNotifier] is set, a coalesced NOTIFY is sent in
// the background, unless the transaction that just committed carried one (see
// WithNotifier): a writer that commits such a transaction must call Wake right after,
// as InTx and the consumer's AfterCommit do. Without either, the relay finds the rows
// at its next poll.
// Wake never blocks and is safe for concurrent use.
func (o *Outbox) Wake() {
	if ch := o.leaderWake.Load(); ch != nil {
		select {
		case *ch <- struct{}{}:
		default: // a wake-up is already pending; it covers this one
		}
		return
	}
	if o.notifier == nil {
		return
	}
	o.mu.Lock()
	if !o.ownWake.IsZero() {
		// The committing transaction carried a NOTIFY (queueNotify): this is, within
		// microseconds, its own Wake. If it is another writer's, the writer's own Wake
		// comes next and goes on below. (A transaction whose COMMIT failed after its
		// NOTIFY ran calls no Wake: then the next Wake within NotifySpacing is skipped
		// and its rows wait for the next NOTIFY or the relay's poll.)
		recent := time.Since(o.ownWake) < NotifySpacing
		o.ownWake = time.Time{}
		if recent {
			o.mu.Unlock()
			return
		}
	}
	if o.notifying {
		o.dirty = true
		o.mu.Unlock()
		return
	}
	o.notifying = true
	o.mu.Unlock()
	go o.notifyLoop()
}

// NotifySpacing is the least time between two NOTIFYs of one Outbox ([WithNotifier]):
// the relay's [DefaultBatchLinger]. A leader that just read a small batch reads again
// no sooner than that, so more frequent NOTIFYs would only cost transactions (each
// one has a transaction id and a commit record).
const NotifySpacing = DefaultBatchLinger

// notifyLoop sends NOTIFYs, at least NotifySpacing apart, until no Wake arrived
// during the last one or the pause after it. Errors are dropped on purpose: the
// relay's poll is the fallback for a lost NOTIFY.
func (o *Outbox) notifyLoop() {
	for {
		sent := time.Now()
		o.mu.Lock()
		o.lastSent = sent
		o.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = o.notifier.Exec(ctx, "SELECT pg_notify($1, '')", o.names.channel)
		cancel()
		if d := NotifySpacing - time.Since(sent); d > 0 {
			time.Sleep(d) // Wake calls meanwhile set dirty: one NOTIFY covers them all
		}
		o.mu.Lock()
		if !o.dirty {
			o.notifying = false
			o.mu.Unlock()
			return
		}
		o.dirty = false
		o.mu.Unlock()
	}
}
