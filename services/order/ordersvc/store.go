package ordersvc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
)

// Order is one order as stored.
type Order struct {
	ID         string
	CustomerID string
	Items      []events.Item
	Amount     int64
	State      State
	// Reason explains a terminal state (why rejected, cancelled or failed).
	Reason string
	Facts  Facts
	// StateSince is when the order entered State.
	StateSince time.Time
	// DeadlineAt is the deadline of State (saga deadline while PENDING, compensation
	// deadline while CANCELLING); zero in terminal states.
	DeadlineAt time.Time
	// TraceID and SpanID identify the span that created the order: the saga's trace.
	TraceID, SpanID string
	// TraceSampled is the sampled flag of that span: later work on the order continues
	// the trace with the sampling decision taken at its start.
	TraceSampled bool
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// Version counts the order's updates.
	Version int64
	// CompensationAttempts is how many times the order sent order.cancel_requested (0
	// before any cancellation).
	CompensationAttempts int
	// Stuck reports whether the order has stayed in its non-terminal state longer than
	// its StuckAfter when it was read (database clock).
	Stuck bool
	// Age is how old the order was when it was read (database clock).
	Age time.Duration

	readAt time.Time // database clock at the read
}

func (o Order) sagaSpanContext() (trace.SpanContext, bool) {
	tid, err1 := trace.TraceIDFromHex(o.TraceID)
	sid, err2 := trace.SpanIDFromHex(o.SpanID)
	if err1 != nil || err2 != nil {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, Remote: true,
	})
	if o.TraceSampled {
		sc = sc.WithTraceFlags(trace.FlagsSampled)
	}
	return sc, sc.IsValid()
}

// HistoryEntry is one trigger an order saw.
type HistoryEntry struct {
	From, To State // From is "" for the creation
	// CauseEventID is the id of the causing event ("" for commands).
	CauseEventID string
	// CauseEventType is the event type, or the command (command.create, command.cancel,
	// deadline.saga, deadline.compensation).
	CauseEventType string
	// Ignored marks a trigger that was invalid in From and changed nothing.
	Ignored bool
	// Note explains an ignored trigger or a reason.
	Note string
	At   time.Time
}

// cmdCreate names the creation in the history.
const cmdCreate = "command.create"

const orderColumns = `id::text, customer_id, items, amount, state, reason,
	payment_authorized, payment_declined, payment_refunded, stock_reserved, stock_unavailable, stock_released,
	state_since, deadline_at, trace_id, span_id, trace_sampled, created_at, updated_at, version, compensation_attempts, now()`

func (s *Service) scanOrder(row pgx.Row) (Order, error) {
	var (
		o        Order
		state    string
		deadline *time.Time
		now      time.Time
		f        = &o.Facts
	)
	err := row.Scan(&o.ID, &o.CustomerID, &o.Items, &o.Amount, &state, &o.Reason,
		&f.PaymentAuthorized, &f.PaymentDeclined, &f.PaymentRefunded, &f.StockReserved, &f.StockUnavailable, &f.StockReleased,
		&o.StateSince, &deadline, &o.TraceID, &o.SpanID, &o.TraceSampled, &o.CreatedAt, &o.UpdatedAt, &o.Version, &o.CompensationAttempts, &now)
	if err != nil {
		return Order{}, err
	}
	o.State = State(state)
	// The first send is not a re-send.
	f.ResendsLeft = max(0, s.cfg.CompensationRetries-max(0, o.CompensationAttempts-1))
	if deadline != nil {
		o.DeadlineAt = *deadline
	}
	o.readAt = now
	o.Age = now.Sub(o.CreatedAt)
	o.Stuck = !o.State.Terminal() && now.Sub(o.StateSince) > s.cfg.StuckAfter[o.State]
	return o, nil
}

// q is what both a pool and a transaction offer.
type q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// load reads one order; forUpdate locks its row until the transaction ends.
func (s *Service) load(ctx context.Context, db q, id string, forUpdate bool) (Order, error) {
	sql := "SELECT " + orderColumns + " FROM orders WHERE id = $1"
	if forUpdate {
		sql += " FOR UPDATE"
	}
	o, err := s.scanOrder(db.QueryRow(ctx, sql, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Order{}, fmt.Errorf("ordersvc: load order %s: %w", id, err)
	}
	return o, nil
}

// validID reports whether id is a canonical UUID (the only form order ids take).
func validID(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && u.String() == id
}

// Get returns the order with its full history, oldest entry first.
func (s *Service) Get(ctx context.Context, id string) (Order, []HistoryEntry, error) {
	if !validID(id) {
		return Order{}, nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	o, err := s.load(ctx, s.db, id, false)
	if err != nil {
		return Order{}, nil, err
	}
	rows, err := s.db.Query(ctx, `SELECT from_state, to_state, cause_event_id, cause_event_type, ignored, note, at
		FROM order_history WHERE order_id = $1 ORDER BY id`, id)
	if err != nil {
		return Order{}, nil, fmt.Errorf("ordersvc: history of %s: %w", id, err)
	}
	hist, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (HistoryEntry, error) {
		var h HistoryEntry
		var from, to string
		err := r.Scan(&from, &to, &h.CauseEventID, &h.CauseEventType, &h.Ignored, &h.Note, &h.At)
		h.From, h.To = State(from), State(to)
		return h, err
	})
	if err != nil {
		return Order{}, nil, fmt.Errorf("ordersvc: history of %s: %w", id, err)
	}
	return o, hist, nil
}

// queueInsert queues on b the statements that write a new PENDING order, its creation
// history entry and order.created; *o receives the order when b is sent. Sent as one
// batch (one round trip), they commit together: in the batch's implicit transaction, or
// in the transaction that sends it.
func (s *Service) queueInsert(ctx context.Context, b *pgx.Batch, id string, req CreateRequest, o *Order) error {
	var traceID, spanID string
	sc := trace.SpanContextFromContext(ctx)
	if sc.IsValid() {
		traceID, spanID = sc.TraceID().String(), sc.SpanID().String()
	}
	ev, err := events.OrderCreatedEvent.New(id, events.OrderCreatedV1{
		OrderID: id, CustomerID: req.CustomerID, Items: req.Items, Amount: req.Amount,
	})
	if err != nil {
		return fmt.Errorf("ordersvc: build order.created: %w", err)
	}
	// The order and its creation history entry in one statement, then its event.
	b.Queue(`WITH h AS (
			INSERT INTO order_history (order_id, from_state, to_state, cause_event_type) VALUES ($1, '', $5, $9)
		)
		INSERT INTO orders (id, customer_id, items, amount, state, deadline_at, trace_id, span_id, trace_sampled)
		VALUES ($1, $2, $3, $4, $5, now() + $6::bigint * interval '1 microsecond', $7, $8, $10)
		RETURNING `+orderColumns,
		id, req.CustomerID, req.Items, req.Amount, string(Pending), s.cfg.SagaTimeout.Microseconds(), traceID, spanID, cmdCreate,
		sc.IsSampled(),
	).QueryRow(func(row pgx.Row) error {
		var err error
		if *o, err = s.scanOrder(row); err != nil {
			return fmt.Errorf("ordersvc: insert order: %w", err)
		}
		return nil
	})
	if err := s.outbox.Queue(ctx, b, events.TopicOrders, ev); err != nil {
		return fmt.Errorf("ordersvc: %w", err)
	}
	return nil
}

// apply applies trigger t to o, whose row tx has locked (load with forUpdate). cause is
// the causing event (nil for commands). reason explains the move to a new state: it is
// stored on the order when the state changes (a cancellation's reason is kept through
// CANCELLED) and travels in the emitted event.
//
// For a valid trigger it updates the row, appends the history entry and enqueues the
// rule's event, all in tx. For an invalid one it returns an error wrapping
// ErrInvalidTransition; when the trigger is an event, it first records the event's
// facts and an ignored history entry in tx, so that committing tx settles the event
// for good (a late event is not retried forever), and the ignored entry shows in the
// history.
func (s *Service) apply(ctx context.Context, tx pgx.Tx, o Order, t Trigger, cause *event.Event, reason string) (Order, Decision, error) {
	d, derr := Decide(o.State, o.Facts, t)
	causeID := ""
	if cause != nil {
		causeID = cause.ID
	}
	if derr != nil {
		if cause == nil {
			return o, d, derr
		}
		note := fmt.Sprintf("no transition for %s in %s", t, o.State)
		if o.State.Terminal() {
			note = fmt.Sprintf("late event: %s is terminal", o.State)
		}
		if err := s.writeFacts(ctx, tx, o.ID, d.Facts); err != nil {
			return o, d, err
		}
		if err := s.writeHistory(ctx, tx, o.ID, o.State, o.State, causeID, string(t), true, note); err != nil {
			return o, d, err
		}
		consumer.AfterCommit(ctx, tx, func() {
			s.ignored.Add(ctx, 1, metric.WithAttributes(attribute.String("state", string(o.State)), attribute.String("trigger", string(t))))
		})
		return o, d, derr
	}
	if d.Noop {
		return o, d, nil
	}

	stored := reason
	switch {
	case d.To == Cancelled && d.From == CompensationFailed:
		stored = "compensation completed late, after it had failed" // replaces the failure's reason
	case d.To == Cancelled:
		stored = "" // keep the cancellation's reason; the settling event's goes to the history
	}
	// Every send of the cancellation (the first, a re-send at the deadline, one by hand)
	// is a compensation attempt with its own deadline.
	send := d.Emit == events.OrderCancelRequested
	attempt := o.CompensationAttempts + 1
	note := ""
	if d.From != d.To || send {
		note = reason
	}
	// The order's update and its history entry in one statement (one round trip).
	o2, err := s.scanOrder(tx.QueryRow(ctx, `WITH h AS (
			INSERT INTO order_history (order_id, from_state, to_state, cause_event_id, cause_event_type, ignored, note)
			VALUES ($1, $12, $2, $13, $14, false, $15)
		)
		`+updateOrderSQL+`
		RETURNING `+orderColumns,
		transitionArgs(o.ID, d, stored, s.cfg.attemptTimeout(attempt), send, causeID, t, note)...))
	if err != nil {
		return o, d, fmt.Errorf("ordersvc: update order %s: %w", o.ID, err)
	}
	if err := s.applied(ctx, tx, o2, d, t, cause, send && o.CompensationAttempts > 0); err != nil {
		return o, d, err
	}
	return o2, d, nil
}

// applied does what follows an order's update by a transition d, in tx: it enqueues the
// rule's event and, once tx has committed (consumer.AfterCommit), counts the transition
// (and the re-send, if resend).
func (s *Service) applied(ctx context.Context, tx pgx.Tx, o2 Order, d Decision, t Trigger, cause *event.Event, resend bool) error {
	if d.Emit != "" {
		ev, err := newEvent(d.Emit, o2.ID, o2.Reason, o2.CompensationAttempts, cause)
		if err != nil {
			return err
		}
		if err := s.pub.Publish(ctx, tx, events.TopicOrders, ev); err != nil {
			return fmt.Errorf("ordersvc: %w", err)
		}
	}
	consumer.AfterCommit(ctx, tx, func() {
		if resend {
			s.resends.Add(ctx, 1, metric.WithAttributes(attribute.String("trigger", string(t))))
		}
		switch {
		case !d.From.Terminal() && d.To.Terminal():
			s.pending.Add(-1) // until the next refresh of the pending count
		case d.From.Terminal() && !d.To.Terminal():
			s.pending.Add(1)
		}
		if d.From != d.To {
			s.transitions.Add(ctx, 1, metric.WithAttributes(attribute.String("from", string(d.From)), attribute.String("to", string(d.To))))
		}
	})
	return nil
}

// updateOrderSQL moves order $1 to state $2 with the facts $5..$10 (see transitionArgs):
// the one UPDATE of every transition.
const updateOrderSQL = `UPDATE orders SET
		state = $2,
		reason = CASE WHEN $3 = '' OR state = $2 THEN reason ELSE $3 END,
		state_since = CASE WHEN state = $2 THEN state_since ELSE now() END,
		-- The deadline follows the state: the attempt's deadline on each send of the
		-- cancellation, kept while the state stays, none in a terminal state.
		deadline_at = CASE WHEN $11 THEN now() + $4::bigint * interval '1 microsecond'
			WHEN state = $2 THEN deadline_at
			ELSE NULL END,
		compensation_attempts = compensation_attempts + CASE WHEN $11 THEN 1 ELSE 0 END,
		payment_authorized = $5, payment_declined = $6, payment_refunded = $7,
		stock_reserved = $8, stock_unavailable = $9, stock_released = $10,
		updated_at = now(), version = version + 1
		WHERE id = $1`

// transitionArgs are the parameters $1..$15 of a transition's statement: the order, the
// decision, the reason stored on the order, the deadline of a cancellation's send (send),
// and the history entry's cause and note.
func transitionArgs(id string, d Decision, stored string, attemptTimeout time.Duration, send bool, causeID string, t Trigger, note string) []any {
	f := d.Facts
	return []any{id, string(d.To), stored, attemptTimeout.Microseconds(),
		f.PaymentAuthorized, f.PaymentDeclined, f.PaymentRefunded, f.StockReserved, f.StockUnavailable, f.StockReleased,
		send, string(d.From), causeID, string(t), note}
}

// expected are, for the events of the forward path, the facts a PENDING order usually
// has when the event arrives: payment's answer to order.created comes first, inventory's
// answer to payment.authorized second.
var expected = map[Trigger]Facts{
	OnPaymentAuthorized: {},
	OnPaymentDeclined:   {},
	OnStockReserved:     {PaymentAuthorized: true},
	OnStockUnavailable:  {PaymentAuthorized: true},
}

// applyExpected applies event ev (trigger t) in one round trip when order id is in the
// state it usually is when t arrives (see expected): PENDING, with exactly the expected
// facts, never cancelled. It decides the transition for that state and facts with Decide,
// and sends one statement that updates the order only if its row still has that state,
// those facts and no compensation attempt, and appends the history entry only if it did.
// The UPDATE takes the row lock, and under READ COMMITTED it rechecks the condition on
// the row's latest version, so the decision is applied to exactly the order it was taken
// for. The statement also checks claim c (see "Cross-checks" in the package doc). ok is
// false, with nothing written, when the order is in any other state, does not match c
// or does not exist: apply on the locked row decides then. The Order returned has only its ID,
// State, Reason and CompensationAttempts.
func (s *Service) applyExpected(ctx context.Context, tx pgx.Tx, id string, t Trigger, ev *event.Event, reason string, c *claim) (o Order, d Decision, ok bool, err error) {
	f, known := expected[t]
	if !known {
		return Order{}, Decision{}, false, nil
	}
	f.ResendsLeft = s.cfg.CompensationRetries // as scanOrder derives it with no attempt yet
	d, err = Decide(Pending, f, t)
	if err != nil || d.Noop || d.Emit == events.OrderCancelRequested {
		return Order{}, Decision{}, false, nil // not a transition this path writes
	}
	stored, note := reason, ""
	if d.From != d.To {
		note = reason
	}
	args := transitionArgs(id, d, stored, 0, false, ev.ID, t, note)
	args = append(args, f.PaymentAuthorized, f.PaymentDeclined, f.PaymentRefunded, f.StockReserved, f.StockUnavailable, f.StockReleased)
	// The cross-check ($22..$26): the event's items are the order's (the order's SKUs
	// are distinct, so containment both ways with equal lengths is equality as sets) and
	// a payment's amount and customer are; otherwise the locked path decides.
	var cc claim
	if c != nil {
		cc = *c
	}
	if cc.items == nil {
		cc.items = []events.Item{}
	}
	args = append(args, c != nil, cc.payment, cc.amount, cc.customer, cc.items)
	// Only what the event and the log need comes back (not the whole row: the items'
	// JSON, the times).
	o = Order{ID: id, State: d.To}
	err = tx.QueryRow(ctx, `WITH u AS (
			`+updateOrderSQL+` AND state = $12 AND compensation_attempts = 0
			AND payment_authorized = $16 AND payment_declined = $17 AND payment_refunded = $18
			AND stock_reserved = $19 AND stock_unavailable = $20 AND stock_released = $21
			AND (NOT $22::boolean OR (items @> $26::jsonb AND $26::jsonb @> items
				AND jsonb_array_length(items) = jsonb_array_length($26::jsonb)
				AND (NOT $23::boolean OR (amount = $24::bigint AND customer_id = $25::text))))
			RETURNING reason, compensation_attempts
		), h AS (
			INSERT INTO order_history (order_id, from_state, to_state, cause_event_id, cause_event_type, ignored, note)
			SELECT $1::uuid, $12::text, $2::text, $13::text, $14::text, false, $15::text FROM u
		)
		SELECT * FROM u`, args...).Scan(&o.Reason, &o.CompensationAttempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, Decision{}, false, nil
	}
	if err != nil {
		return Order{}, Decision{}, false, fmt.Errorf("ordersvc: update order %s: %w", id, err)
	}
	if err := s.applied(ctx, tx, o, d, t, ev, false); err != nil {
		return Order{}, Decision{}, false, err
	}
	return o, d, true, nil
}

func (s *Service) writeFacts(ctx context.Context, tx pgx.Tx, id string, f Facts) error {
	_, err := tx.Exec(ctx, `UPDATE orders SET
		payment_authorized = $2, payment_declined = $3, payment_refunded = $4,
		stock_reserved = $5, stock_unavailable = $6, stock_released = $7, updated_at = now()
		WHERE id = $1`,
		id, f.PaymentAuthorized, f.PaymentDeclined, f.PaymentRefunded, f.StockReserved, f.StockUnavailable, f.StockReleased)
	if err != nil {
		return fmt.Errorf("ordersvc: update facts of %s: %w", id, err)
	}
	return nil
}

func (s *Service) writeHistory(ctx context.Context, tx pgx.Tx, id string, from, to State, causeID, causeType string, ignored bool, note string) error {
	_, err := tx.Exec(ctx, `INSERT INTO order_history
		(order_id, from_state, to_state, cause_event_id, cause_event_type, ignored, note)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		id, string(from), string(to), causeID, causeType, ignored, note)
	if err != nil {
		return fmt.Errorf("ordersvc: insert history of %s: %w", id, err)
	}
	return nil
}

// ListQuery filters List.
type ListQuery struct {
	// State, if set, keeps only orders in that state.
	State State
	// Stuck keeps only stuck orders (non-terminal and past their state's StuckAfter).
	Stuck bool
	// OlderThan, if positive, keeps only orders created longer ago than that.
	OlderThan time.Duration
	// Limit bounds the result (default 100, at most MaxListLimit).
	Limit int
}

// Limits of List.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// stuckCondition is the SQL condition for "stuck", with the per-state thresholds as
// microsecond parameters $n (PENDING) and $n+1 (CANCELLING).
func stuckCondition(n int) string {
	return fmt.Sprintf(`(state IN ('PENDING', 'CANCELLING') AND state_since < now() -
		(CASE state WHEN 'PENDING' THEN $%d::bigint ELSE $%d::bigint END) * interval '1 microsecond')`, n, n+1)
}

// List returns the orders matching lq, oldest first.
func (s *Service) List(ctx context.Context, lq ListQuery) ([]Order, error) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) int { args = append(args, v); return len(args) }
	if lq.State != "" {
		where = append(where, fmt.Sprintf("state = $%d", arg(string(lq.State))))
	}
	if lq.Stuck {
		n := arg(s.cfg.StuckAfter[Pending].Microseconds())
		arg(s.cfg.StuckAfter[Cancelling].Microseconds())
		where = append(where, stuckCondition(n))
	}
	if lq.OlderThan > 0 {
		where = append(where, fmt.Sprintf("created_at < now() - $%d::bigint * interval '1 microsecond'", arg(lq.OlderThan.Microseconds())))
	}
	limit := lq.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	sql := "SELECT " + orderColumns + " FROM orders"
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += fmt.Sprintf(" ORDER BY created_at, id LIMIT $%d", arg(limit))
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("ordersvc: list orders: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Order, error) { return s.scanOrder(r) })
	if err != nil {
		return nil, fmt.Errorf("ordersvc: list orders: %w", err)
	}
	return out, nil
}

// CountByState returns the number of orders in each state (zero counts included), in
// one GROUP BY over the orders table.
func (s *Service) CountByState(ctx context.Context) (map[State]int64, error) {
	rows, err := s.db.Query(ctx, "SELECT state, count(*) FROM orders GROUP BY state")
	if err != nil {
		return nil, fmt.Errorf("ordersvc: count orders: %w", err)
	}
	counts := make(map[State]int64, len(States))
	for _, st := range States {
		counts[st] = 0
	}
	var (
		st string
		n  int64
	)
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error { counts[State(st)] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("ordersvc: count orders: %w", err)
	}
	return counts, nil
}

// CountStuck returns the number of stuck orders per non-terminal state (zero counts
// included).
func (s *Service) CountStuck(ctx context.Context) (map[State]int64, error) {
	rows, err := s.db.Query(ctx, "SELECT state, count(*) FROM orders WHERE "+stuckCondition(1)+" GROUP BY state",
		s.cfg.StuckAfter[Pending].Microseconds(), s.cfg.StuckAfter[Cancelling].Microseconds())
	if err != nil {
		return nil, fmt.Errorf("ordersvc: count stuck orders: %w", err)
	}
	counts := map[State]int64{Pending: 0, Cancelling: 0}
	var (
		st string
		n  int64
	)
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error { counts[State(st)] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("ordersvc: count stuck orders: %w", err)
	}
	return counts, nil
}
