package ordersvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/services/events"
)

// Validation limits of CreateRequest.
const (
	MaxItems     = 50
	MaxQty       = 1000
	MaxAmount    = 1_000_000_000_00 // cents: one billion
	MaxIDLength  = 64
	idempotScope = "order/http/create"
)

var (
	customerPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)
	skuPattern      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
)

// CreateRequest is the body of POST /orders.
type CreateRequest struct {
	CustomerID string        `json:"customer_id"`
	Items      []events.Item `json:"items"`
	// Amount is the order total in cents.
	Amount int64 `json:"amount"`
}

// Validate checks the request: a customer id of 1 to 64 characters [A-Za-z0-9_.:-]
// starting with a letter or digit, 1 to 50 items with distinct SKUs of the same form
// (without ':') and quantities 1 to 1000, and an amount of 1 to MaxAmount cents. The
// error wraps ErrInvalidRequest and names the first offending field.
func (r CreateRequest) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	switch {
	case r.CustomerID == "":
		return bad("customer_id is required")
	case !customerPattern.MatchString(r.CustomerID):
		return bad("customer_id must be 1-64 characters of [A-Za-z0-9_.:-], starting with a letter or digit")
	case len(r.Items) == 0:
		return bad("items must hold at least one item")
	case len(r.Items) > MaxItems:
		return bad("items must hold at most %d items", MaxItems)
	case r.Amount <= 0:
		return bad("amount must be a positive number of cents")
	case r.Amount > MaxAmount:
		return bad("amount must be at most %d cents", int64(MaxAmount))
	}
	seen := make(map[string]bool, len(r.Items))
	for i, it := range r.Items {
		switch {
		case !skuPattern.MatchString(it.SKU):
			return bad("items[%d].sku must be 1-64 characters of [A-Za-z0-9_.-], starting with a letter or digit", i)
		case it.Qty < 1 || it.Qty > MaxQty:
			return bad("items[%d].qty must be between 1 and %d", i, MaxQty)
		case seen[it.SKU]:
			return bad("items[%d].sku %q appears twice", i, it.SKU)
		}
		seen[it.SKU] = true
	}
	return nil
}

// Create validates req and creates a PENDING order, its history entry and its
// order.created event in one transaction (without a key: one pipelined round trip in an
// implicit transaction). The order id is a new UUIDv7, the correlation
// id of its saga, and the current span (the HTTP request's) becomes the saga's trace.
//
// With a non-empty idempotency key, the request is done at most once per key
// (idempotency.Store.QueueNewClaim: the key's claim, with the new order's id as its
// response, goes in the order's round trip; a key that has a record falls back to
// ClaimWithResponse in a transaction): a repetition with the same body returns the order created
// first and created == false; the same key with another body fails with an error
// wrapping idempotency.ErrKeyReused.
func (s *Service) Create(ctx context.Context, req CreateRequest, key string) (o Order, created bool, err error) {
	if err := req.Validate(); err != nil {
		return Order{}, false, err
	}
	u, err := uuid.NewV7()
	if err != nil {
		return Order{}, false, fmt.Errorf("ordersvc: new order id: %w", err)
	}
	id := u.String()
	octx := withOrder(ctx, id)
	if key == "" {
		if err := s.admitNew(octx); err != nil {
			return Order{}, false, err
		}
		o, err := s.insertNow(octx, id, req, nil)
		return o, err == nil, err
	}

	body, err := json.Marshal(req) // canonical form: the hash ignores formatting
	if err != nil {
		return Order{}, false, fmt.Errorf("ordersvc: encode request: %w", err)
	}
	hash := idempotency.Hash(body)
	keyErr := func(err error) error {
		if errors.Is(err, idempotency.ErrInvalidKey) {
			return fmt.Errorf("%w: Idempotency-Key must be 1 to %d bytes", ErrInvalidRequest, idempotency.MaxKeyBytes)
		}
		return err
	}
	// The response (the order id) is known up front, so it is stored with the claim.
	// Fast path, below the pending limit: the key's claim leads the order's batch in one
	// implicit transaction, one round trip like a create without a key. If the key has a
	// record (a replay, a reuse, a concurrent request that committed first, an expired
	// record), the claim fails, the batch writes nothing, and the slow path decides.
	if !s.atLimit() {
		o, err := s.insertNow(octx, id, req, func(b *pgx.Batch) error {
			return s.idem.QueueNewClaim(b, idempotScope, key, hash, []byte(id))
		})
		if !errors.Is(err, idempotency.ErrKeyExists) {
			return o, err == nil, keyErr(err)
		}
	}
	// Slow path: BEGIN, the claim with its response (ClaimWithResponse), the order's
	// batch, COMMIT, with no Complete. A rollback (refusal, error) takes the claim and
	// its response with it.
	var c idempotency.Claim
	err = pgx.BeginFunc(octx, s.db, func(tx pgx.Tx) error {
		var err error
		c, err = s.idem.ClaimWithResponse(octx, tx, idempotScope, key, hash, []byte(id))
		if err != nil || c.Duplicate {
			return err
		}
		// Shed here, after the key's claim: a replay never gets this far and still
		// returns its order; a refusal rolls the claim back, so nothing is written.
		if err := s.admitNew(octx); err != nil {
			return err
		}
		b := &pgx.Batch{}
		if err := s.queueInsert(octx, b, id, req, &o); err != nil {
			return err
		}
		return tx.SendBatch(octx, b).Close()
	})
	switch {
	case err != nil:
		return Order{}, false, keyErr(err)
	case c.Duplicate:
		id = string(c.Response)
		ctx = withOrder(ctx, id)
		o, err = s.load(ctx, s.db, id, false)
		return o, false, err
	}
	s.created()
	return o, true, nil
}

// insertNow inserts the new order id in one pipelined round trip, after the statements
// claim (if not nil) queues. No BEGIN/COMMIT: the batch is one implicit transaction, so
// no transaction stays open while this process waits to be scheduled, and a failing
// statement writes nothing.
func (s *Service) insertNow(ctx context.Context, id string, req CreateRequest, claim func(*pgx.Batch) error) (Order, error) {
	b := &pgx.Batch{}
	if claim != nil {
		if err := claim(b); err != nil {
			return Order{}, err
		}
	}
	var o Order
	if err := s.queueInsert(ctx, b, id, req, &o); err != nil {
		return Order{}, err
	}
	if err := s.db.SendBatch(ctx, b).Close(); err != nil {
		return Order{}, err
	}
	s.created()
	return o, nil
}

// created counts a new PENDING order and wakes the outbox relay for its event.
func (s *Service) created() {
	s.pending.Add(1)
	s.outbox.Wake()
}

// Cancel requests the cancellation of an order: PENDING moves to CANCELLING and
// order.cancel_requested is published; payment and inventory compensate and the order
// completes to CANCELLED. Cancelling an order that is already CANCELLING or CANCELLED
// changes nothing and succeeds; any other state fails with ErrInvalidTransition (and
// the current order). The work runs in a span of the saga's trace, linked to the caller's.
func (s *Service) Cancel(ctx context.Context, id string) (Order, error) {
	ctx, o, _, err := s.command(ctx, id, "order.cancel", CmdCancel, func(Order) string { return "cancelled by customer" })
	if errors.Is(err, ErrInvalidTransition) {
		s.log.InfoContext(ctx, "order: cancel rejected", "state", string(o.State))
		return o, err
	}
	if err != nil {
		return Order{}, err
	}
	return o, nil
}

// RetryCompensation re-sends the cancellation of an order by hand: a CANCELLING order
// sends order.cancel_requested again now (with a new attempt deadline), a
// COMPENSATION_FAILED one moves back to CANCELLING and sends it. Payment and inventory
// compensate at most once per order and repeat their answer, so a retry is always safe.
// Each retry is a history entry (command.retry_compensation). Any other state fails with
// ErrInvalidTransition (and the current order).
func (s *Service) RetryCompensation(ctx context.Context, id string) (Order, error) {
	ctx, o, d, err := s.command(ctx, id, "order.retry_compensation", CmdRetryCompensation, func(cur Order) string {
		return fmt.Sprintf("compensation retried by hand (attempt %d; payment %s, stock %s)",
			cur.CompensationAttempts+1, cur.Facts.PaymentStatus(), cur.Facts.StockStatus())
	})
	if errors.Is(err, ErrInvalidTransition) {
		s.log.InfoContext(ctx, "order: compensation retry rejected", "state", string(o.State))
		return o, err
	}
	if err != nil {
		return Order{}, err
	}
	s.log.WarnContext(ctx, "order: compensation retried by hand", "from", string(d.From),
		"attempt", o.CompensationAttempts)
	return o, nil
}

// command applies a customer's or operator's command to order id in a transaction of its
// own, in a span of the saga's trace (linked to the caller's); reason gives the history
// entry's reason from the locked current order. It returns the context with that span,
// the order after the command (the current one when the transition is refused, with
// ErrInvalidTransition) and the decision.
func (s *Service) command(ctx context.Context, id, spanName string, cmd Trigger, reason func(cur Order) string) (context.Context, Order, Decision, error) {
	if !validID(id) {
		return ctx, Order{}, Decision{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	ctx = withOrder(ctx, id)
	o, err := s.load(ctx, s.db, id, false)
	if err != nil {
		return ctx, Order{}, Decision{}, err
	}
	ctx, span := s.sagaSpan(ctx, spanName, o)
	var d Decision
	// InTx: the transition's counts run after the commit, and the relay is woken.
	err = s.outbox.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		cur, err := s.load(ctx, tx, id, true)
		if err != nil {
			return err
		}
		o, d, err = s.apply(ctx, tx, cur, cmd, nil, reason(cur))
		return err
	})
	endSpan(span, err)
	return ctx, o, d, err
}

// triggerTopics are the events the order service consumes, and the topic of each.
var triggerTopics = map[Trigger]string{
	OnPaymentAuthorized: events.TopicPayments, OnPaymentDeclined: events.TopicPayments,
	OnPaymentRefunded: events.TopicPayments, OnStockReserved: events.TopicInventory,
	OnStockUnavailable: events.TopicInventory, OnStockReleased: events.TopicInventory,
}

// register declares and routes the order service's events on a: it produces order.*;
// it handles every event type of triggerTopics, each on its topic, reading
// payment.authorized (v2, and v1 upcast to it) and stock.reserved whole (their claims
// are checked against the order) and the other answers as an outcome (order id and
// reason).
func (s *Service) register(a *app.App) {
	a.Produces(events.OrderCreatedEvent, events.OrderConfirmedEvent, events.OrderRejectedEvent,
		events.OrderCancelRequestedEvent, events.OrderCancelledEvent)
	app.On(a, events.TopicPayments, events.PaymentAuthorized, 2, s.onPayment)
	app.Upcast(a, events.PaymentAuthorized, 1, 2, events.UpcastPaymentAuthorized)
	app.On(a, events.TopicPayments, events.PaymentDeclined, 1, s.onOutcome)
	app.On(a, events.TopicPayments, events.PaymentRefunded, 1, s.onOutcome)
	app.On(a, events.TopicInventory, events.StockReserved, 1, s.onStock)
	app.On(a, events.TopicInventory, events.StockUnavailable, 1, s.onOutcome)
	app.On(a, events.TopicInventory, events.StockReleased, 1, s.onOutcome)
}

// Contracts returns the order service's declarations (what it registers on the kit),
// for the saga's catalogue.
func Contracts() []contract.Declaration {
	return app.Declarations("order", (&Service{}).register)
}

// outcome is what the order service reads of payment.declined, payment.refunded,
// stock.unavailable and stock.released: which order, and why.
type outcome struct {
	OrderID string `json:"order_id" jsonschema:"maxLength=128" jsonschema_description:"The order (also the event's subject and Kafka key)."`
	Reason  string `json:"reason,omitempty" jsonschema:"maxLength=256" jsonschema_description:"Why, recorded in the order's history."`
}

// Subject returns p.OrderID (contract.Decode checks it is the event's subject).
func (p outcome) Subject() string { return p.OrderID }

// onPayment applies payment.authorized after checking its claim (amount, customer,
// items) against the order. The saga's amounts are in one currency: a payment in
// another is refused (dead-lettered), not converted.
func (s *Service) onPayment(ctx context.Context, tx pgx.Tx, ev event.Event, p events.PaymentAuthorizedV2) error {
	if p.Currency != events.Currency {
		return consumer.Permanent(fmt.Errorf("ordersvc: payment in %q, the saga's amounts are in %s", p.Currency, events.Currency))
	}
	return s.handle(ctx, tx, ev, "", &claim{payment: true, amount: p.AmountCents, customer: p.CustomerID, items: p.Items})
}

// onPaymentV1 is onPayment for a v1 payload, upcast as the kit's consumer does.
func (s *Service) onPaymentV1(ctx context.Context, tx pgx.Tx, ev event.Event, p events.PaymentV1) error {
	v2, err := events.UpcastPaymentAuthorized(p)
	if err != nil {
		return consumer.Permanent(err)
	}
	return s.onPayment(ctx, tx, ev, v2)
}

// onStock applies stock.reserved after checking its items against the order.
func (s *Service) onStock(ctx context.Context, tx pgx.Tx, ev event.Event, p events.StockV1) error {
	return s.handle(ctx, tx, ev, p.Reason, &claim{items: p.Items})
}

// onOutcome applies an answer that carries no claim: a decline, a refund, unavailable
// or released stock.
func (s *Service) onOutcome(ctx context.Context, tx pgx.Tx, ev event.Event, p outcome) error {
	what := map[string]string{events.PaymentDeclined: "payment declined", events.PaymentRefunded: "payment refunded"}[ev.Type]
	switch {
	case what == "":
		return s.handle(ctx, tx, ev, p.Reason, nil)
	case p.Reason != "":
		return s.handle(ctx, tx, ev, what+": "+p.Reason, nil)
	}
	return s.handle(ctx, tx, ev, what, nil)
}

// Topics are the topics the order service consumes.
var Topics = []string{events.TopicPayments, events.TopicInventory}

// HandleEvent is the consumer's business handler as a consumer.TxHandler (the kit
// registers one typed handler per event type, see register; HandleEvent decodes as they
// do and calls the same code): it locks the order named by the event's subject and
// applies the event through the transition table, in tx.
//
// An event that is invalid in the order's state (e.g. a late event after a terminal
// state) is not an error: its facts and an ignored history entry are written, a warning
// is logged, and HandleEvent returns nil, so the event is settled, not retried. An
// event for an unknown order or with a malformed payload fails permanently (it is
// dead-lettered).
func (s *Service) HandleEvent(ctx context.Context, tx pgx.Tx, ev event.Event) error {
	switch ev.Type {
	case events.PaymentAuthorized:
		if ev.SchemaVersion < 2 {
			return app.Decoded(s.onPaymentV1)(ctx, tx, ev)
		}
		return app.Decoded(s.onPayment)(ctx, tx, ev)
	case events.StockReserved:
		return app.Decoded(s.onStock)(ctx, tx, ev)
	}
	return app.Decoded(s.onOutcome)(ctx, tx, ev)
}

// handle applies ev, whose payload says reason and claims c (nil: nothing to check).
func (s *Service) handle(ctx context.Context, tx pgx.Tx, ev event.Event, reason string, c *claim) error {
	id := ev.Subject
	if !validID(id) {
		return fmt.Errorf("ordersvc: subject %q is not an order id: %w", id, event.ErrMalformed)
	}
	// The usual case in one round trip (applyExpected, which checks c); any other on the
	// locked row.
	o2, d, ok, err := s.applyExpected(ctx, tx, id, Trigger(ev.Type), &ev, reason, c)
	if err != nil {
		return err
	}
	if ok {
		s.logTransition(ctx, tx, d, ev, o2)
		return nil
	}
	o, err := s.load(ctx, tx, id, true)
	if errors.Is(err, ErrNotFound) {
		return consumer.Permanent(err)
	}
	if err != nil {
		return err
	}
	if why := c.mismatch(o); why != "" {
		return s.refuse(ctx, tx, o, ev, why)
	}
	o2, d, err = s.apply(ctx, tx, o, Trigger(ev.Type), &ev, reason)
	if errors.Is(err, ErrInvalidTransition) {
		consumer.AfterCommit(ctx, tx, func() {
			s.log.WarnContext(ctx, "order: event ignored: invalid in state",
				"state", string(o.State), "event_type", ev.Type, "event_id", ev.ID)
		})
		return nil
	}
	if err != nil {
		return err
	}
	s.logTransition(ctx, tx, d, ev, o2)
	return nil
}

// logTransition logs the transition d that event ev made (o2: the order after it) once
// tx has committed (consumer.AfterCommit): a transaction that rolls back, or whose
// COMMIT fails and is retried, logs nothing.
func (s *Service) logTransition(ctx context.Context, tx pgx.Tx, d Decision, ev event.Event, o2 Order) {
	consumer.AfterCommit(ctx, tx, func() {
		switch {
		case d.From == CompensationFailed && d.To == Cancelled:
			s.log.WarnContext(ctx, "order: failed compensation completed late", "from", string(d.From), "to", string(d.To),
				"event_type", ev.Type, "event_id", ev.ID)
		case d.From != d.To:
			s.log.InfoContext(ctx, "order: transition", "from", string(d.From), "to", string(d.To),
				"event_type", ev.Type, "event_id", ev.ID, "reason", o2.Reason)
		}
	})
}

// refuse handles event ev that does not match order o (why says how; see "Cross-checks"
// in the package doc): a PENDING order moves to CANCELLING (OnMismatch), any other
// records an ignored entry; after the commit the mismatch is counted and logged; and the
// returned consumer.Reject commits that and dead-letters ev with reason
// events.ReasonMismatch.
func (s *Service) refuse(ctx context.Context, tx pgx.Tx, o Order, ev event.Event, why string) error {
	refusal := fmt.Errorf("%w: %s %s: %s", ErrMismatch, ev.Type, ev.ID, why)
	o2, d, err := s.apply(ctx, tx, o, OnMismatch, &ev, fmt.Sprintf("%s does not match the order: %s", ev.Type, why))
	switch {
	case err == nil:
		s.logTransition(ctx, tx, d, ev, o2)
	case !errors.Is(err, ErrInvalidTransition):
		return err
	}
	consumer.AfterCommit(ctx, tx, func() {
		s.mismatched.Add(ctx, 1, metric.WithAttributes(attribute.String("event_type", ev.Type)))
		s.log.WarnContext(ctx, "order: event does not match the order; not applied, dead-lettered",
			"event_type", ev.Type, "event_id", ev.ID, "mismatch", why, "state", string(o.State), "to", string(d.To))
	})
	return consumer.Reject(consumer.ReasonMismatch, refusal)
}

// claim is what a payment.authorized or stock.reserved says about its order, for the
// cross-check: the items, and for a payment (payment) the amount and customer.
type claim struct {
	payment  bool
	amount   int64
	customer string
	items    []events.Item
}

// mismatch returns how c differs from order o ("" if it does not, or c is nil).
func (c *claim) mismatch(o Order) string {
	switch {
	case c == nil:
		return ""
	case !events.SameItems(c.items, o.Items):
		return fmt.Sprintf("items %s, order %s", fmtItems(c.items), fmtItems(o.Items))
	case c.payment && c.amount != o.Amount:
		return fmt.Sprintf("amount %d, order %d", c.amount, o.Amount)
	case c.payment && c.customer != o.CustomerID:
		return fmt.Sprintf("customer %q, order %q", c.customer, o.CustomerID)
	}
	return ""
}

// fmtItems formats up to 5 items as "sku×qty", then how many more there are.
func fmtItems(items []events.Item) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, it := range items {
		if i == 5 {
			fmt.Fprintf(&b, " …%d more", len(items)-i)
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%q×%d", it.SKU, it.Qty)
	}
	b.WriteByte(']')
	return b.String()
}

// SweepOnce handles up to SweepBatch orders past their deadline, oldest deadline first:
// a PENDING order is cancelled (CANCELLING and order.cancel_requested, reason "saga
// deadline exceeded"); a CANCELLING one re-sends its cancellation with a longer deadline
// while re-sends are left (Settings.CompensationRetries), and moves to
// COMPENSATION_FAILED after that. Each order gets its own transaction that re-reads and
// locks the row, so concurrent sweepers (one per instance) and concurrent events never
// apply a stale decision. It returns the number of orders moved or re-sent.
func (s *Service) SweepOnce(ctx context.Context) (int, error) {
	rows, err := s.db.Query(ctx, `SELECT id::text FROM orders
		WHERE state IN ('PENDING', 'CANCELLING') AND deadline_at <= now()
		ORDER BY deadline_at LIMIT $1`, s.cfg.SweepBatch)
	if err != nil {
		return 0, fmt.Errorf("ordersvc: find expired orders: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("ordersvc: find expired orders: %w", err)
	}
	moved := 0
	var errs []error
	for _, id := range ids {
		ok, err := s.expire(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			moved++
		}
	}
	return moved, errors.Join(errs...)
}

// expire applies the deadline trigger to one order if it is still past its deadline.
func (s *Service) expire(ctx context.Context, id string) (bool, error) {
	ctx = withOrder(ctx, id)
	o, err := s.load(ctx, s.db, id, false)
	if err != nil {
		return false, err
	}
	ctx, span := s.sagaSpan(ctx, "order.deadline", o)
	var (
		d     Decision
		moved bool
	)
	// InTx: the transition's counts run after the commit, and the relay is woken.
	err = s.outbox.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		cur, err := s.load(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if cur.State.Terminal() || cur.DeadlineAt.IsZero() || cur.DeadlineAt.After(cur.readAt) {
			return nil // moved on since we looked
		}
		var (
			t      Trigger
			reason string
		)
		switch cur.State {
		case Pending:
			t, reason = CmdSagaTimeout, fmt.Sprintf("saga deadline exceeded (%s)", s.cfg.SagaTimeout)
		case Cancelling:
			t = CmdCompensationTimeout
			n := max(cur.CompensationAttempts, 1) // orders cancelled before the count existed
			reason = fmt.Sprintf("compensation attempt %d of %d not finished within %s (payment %s, stock %s)",
				n, s.cfg.CompensationRetries+1, s.cfg.attemptTimeout(n), cur.Facts.PaymentStatus(), cur.Facts.StockStatus())
		}
		o, d, err = s.apply(ctx, tx, cur, t, nil, reason)
		moved = err == nil && (d.From != d.To || d.Emit != "")
		return err
	})
	endSpan(span, err)
	if err != nil {
		return false, err
	}
	switch {
	case moved && d.From == d.To:
		s.log.WarnContext(ctx, "order: compensation deadline passed, cancellation re-sent",
			"attempt", o.CompensationAttempts, "deadline_at", o.DeadlineAt, "payment", o.Facts.PaymentStatus(), "stock", o.Facts.StockStatus())
	case moved:
		s.expired.Add(ctx, 1, metric.WithAttributes(attribute.String("state", string(d.From))))
		level := s.log.WarnContext
		if d.To == CompensationFailed {
			level = s.log.ErrorContext
		}
		level(ctx, "order: deadline passed", "from", string(d.From), "to", string(d.To), "reason", o.Reason)
	}
	return moved, nil
}
