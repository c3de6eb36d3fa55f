package paymentsvc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/services/events"
)

// Sentinel errors.
var (
	// ErrGatewayUnavailable is the retryable failure injected by Config.FailureRate.
	ErrGatewayUnavailable = errors.New("paymentsvc: payment gateway unavailable")
	// ErrNotAnnounced is returned (permanent: dead-lettered) for an order.created whose
	// source is not the order service: only the order service announces orders.
	ErrNotAnnounced = errors.New("paymentsvc: order not announced by the order service")
)

// Order statuses (payment_orders.status).
const (
	StatusHeld       = "held"
	StatusAuthorized = "authorized"
	StatusDeclined   = "declined"
	StatusRefunded   = "refunded"
	StatusCancelled  = "cancelled"
)

// Decline and refund reasons carried in PaymentV1.Reason.
const (
	ReasonUnknownCustomer   = "unknown customer"
	ReasonInvalidAmount     = "invalid amount"
	ReasonOverLimit         = "over limit"
	ReasonInsufficientFunds = "insufficient funds"
	ReasonCancelled         = "cancelled"
	ReasonStockUnavailable  = "stock unavailable"
	// ReasonReconciled prefixes the reason of a refund made by the reconciliation.
	ReasonReconciled = "reconciled"
)

// Handlers are the payment service's business handlers (consumer.TxHandler functions).
// Each runs inside the transaction opened by the consumer's Idempotent middleware: its
// writes and the events it enqueues commit together, or not at all.
//
// Cancellation contract (what the order service relies on): for the first
// order.cancel_requested of an order, payment emits one of
//   - payment.refunded (reason "cancelled") if it had charged the order,
//   - payment.declined (reason "cancelled") if it had charged nothing (held by the hang
//     knob, or not seen yet: a tombstone then makes a later order.created charge nothing),
//   - nothing, if it had already declined or refunded the order (that event was the answer).
//
// A re-sent cancellation (events.OrderCancelRequestedV1.Resend: the order did not hear
// back in time) is answered again from the order's row: payment.refunded or
// payment.declined repeating the earlier answer, without moving money, since that answer
// may be what got lost. Compensation is keyed on the order, never on the event id: a
// refund happens at most once per order (stock.unavailable, a cancel, its re-sends and
// the reconciliation never refund twice) and never for more than was charged; the
// database enforces both (one ledger row per order and kind, refunded <= charged).
//
// Orphans (see docs/reliability.md, "Sagas that heal"): payment charges only orders that
// the order service announced, an order.created whose source is the order service and
// whose order has no known REJECTED or CANCELLED outcome; it refunds only orders it
// charged. It records the outcomes the order service announces (OrderOutcome), and
// Reconciler refunds a charge still held by an order that ended REJECTED or CANCELLED.
type Handlers struct {
	pub      app.Publisher
	outbox   *outbox.Outbox
	hang     map[string]bool
	latency  time.Duration
	failRate float64
	authV2   bool // payment.authorized at v2
	random   func() float64
	log      *slog.Logger
	ops      metric.Int64Counter
	amounts  metric.Int64Counter
	fixes    metric.Int64Counter
}

// NewHandlers returns the handlers for cfg. They publish with pub (the service's
// *app.App; nil: app.OutboxPublisher on o); the reconciliation begins its transactions
// on o. logger and mp may be nil (slog.Default, no metrics).
func NewHandlers(pub app.Publisher, o *outbox.Outbox, cfg Config, logger *slog.Logger, mp metric.MeterProvider) (*Handlers, error) {
	if pub == nil {
		pub = app.OutboxPublisher{Outbox: o}
	}
	if logger == nil {
		logger = slog.Default()
	}
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/choreo-saga/choreo/services/payment")
	ops, err := m.Int64Counter("payment.operations", metric.WithDescription("Payment decisions by operation (charge, decline, refund, hold, tombstone, cancel_held, reanswer)."))
	if err != nil {
		return nil, fmt.Errorf("paymentsvc: metrics: %w", err)
	}
	amounts, err := m.Int64Counter("payment.amount", metric.WithUnit("{cent}"), metric.WithDescription("Money moved, by operation (charge, refund)."))
	if err != nil {
		return nil, fmt.Errorf("paymentsvc: metrics: %w", err)
	}
	fixes, err := m.Int64Counter(MetricReconciliations, metric.WithUnit("{correction}"),
		metric.WithDescription("Corrections made by the reconciliation, by kind (refund_rejected, refund_cancelled)."))
	if err != nil {
		return nil, fmt.Errorf("paymentsvc: metrics: %w", err)
	}
	h := &Handlers{
		fixes:    fixes,
		pub:      pub,
		outbox:   o,
		hang:     make(map[string]bool),
		latency:  cfg.Latency,
		failRate: cfg.FailureRate,
		authV2:   cfg.AuthorizedVersion == 2,
		random:   cfg.random(),
		log:      logger,
		ops:      ops,
		amounts:  amounts,
	}
	for _, c := range cfg.HangCustomers {
		h.hang[c] = true
	}
	return h, nil
}

// MetricReconciliations is the counter of the reconciliation's corrections, by kind.
const MetricReconciliations = "payment.reconciliations"

// Topics are the topics the payment service consumes.
var Topics = []string{events.TopicOrders, events.TopicInventory}

// count counts operation op once tx has committed (consumer.AfterCommit): a decision
// whose transaction rolls back, or whose COMMIT is lost and retried, counts once.
func (h *Handlers) count(ctx context.Context, tx pgx.Tx, op string) {
	consumer.AfterCommit(ctx, tx, func() { h.ops.Add(ctx, 1, metric.WithAttributes(attribute.String("op", op))) })
}

// moved adds amount cents to the money moved by op once tx has committed.
func (h *Handlers) moved(ctx context.Context, tx pgx.Tx, op string, amount int64) {
	consumer.AfterCommit(ctx, tx, func() { h.amounts.Add(ctx, amount, metric.WithAttributes(attribute.String("op", op))) })
}

// note logs msg once tx has committed: a log line says what happened, never what a
// rolled-back transaction attempted.
func (h *Handlers) note(ctx context.Context, tx pgx.Tx, level slog.Level, msg string, args ...any) {
	consumer.AfterCommit(ctx, tx, func() { h.log.Log(ctx, level, msg, args...) })
}

// OrderCreated charges the order's customer, or declines. It emits payment.authorized
// (with the items, for inventory) or payment.declined; for a hang customer it records
// the order as held and emits nothing.
func (h *Handlers) OrderCreated(ctx context.Context, tx pgx.Tx, ev event.Event, p events.OrderCreatedV1) error {
	if ev.Source != events.SourceOrder {
		return consumer.Permanent(fmt.Errorf("%w: order.created %s from source %q", ErrNotAnnounced, ev.ID, ev.Source))
	}
	// One round trip: the order's row, if any, its announced outcome, if any, and the
	// customer's balance and limit (kept for readCustomer below).
	var (
		status, outcome *string
		balance, limit  *int64
	)
	err := tx.QueryRow(ctx, `SELECT (SELECT status FROM payment_orders WHERE order_id = $1),
		(SELECT outcome FROM payment_order_outcomes WHERE order_id = $1),
		c.balance, c.charge_limit
		FROM (SELECT 1) AS one LEFT JOIN payment_customers c ON c.id = $2`, p.OrderID, p.CustomerID).Scan(&status, &outcome, &balance, &limit)
	switch {
	case err != nil:
		return fmt.Errorf("paymentsvc: read order: %w", err)
	case status != nil:
		// Already decided (a redelivery under another event id) or cancelled before we
		// saw it (tombstone): never charge twice, never charge a cancelled order.
		h.note(ctx, tx, slog.LevelInfo, "payment: order already known, nothing to do", slog.String("status", *status))
		return nil
	case outcome != nil && *outcome != "CONFIRMED":
		// The order already ended without needing a charge (its order.created comes
		// late, e.g. replayed from a dead-letter topic): charge nothing.
		if _, err := insertOrder(ctx, tx, p.OrderID, p.CustomerID, p.Amount, StatusCancelled, 0, "order already "+*outcome); err != nil {
			return err
		}
		h.count(ctx, tx, "tombstone")
		h.note(ctx, tx, slog.LevelWarn, "payment: order.created for an order that already ended, nothing charged", slog.String("outcome", *outcome))
		return nil
	}

	if h.hang[p.CustomerID] {
		if _, err := insertOrder(ctx, tx, p.OrderID, p.CustomerID, p.Amount, StatusHeld, 0, "hang knob"); err != nil {
			return err
		}
		h.count(ctx, tx, "hold")
		h.note(ctx, tx, slog.LevelWarn, "payment: order held on purpose (hang knob), it will not be answered",
			slog.String("customer_id", p.CustomerID))
		return nil
	}

	// The gateway: added latency and injected failures, before any write.
	if h.latency > 0 {
		t := time.NewTimer(h.latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	if h.failRate > 0 && h.random() < h.failRate {
		return ErrGatewayUnavailable
	}

	reason := ""
	if balance != nil && limit != nil {
		seedCustomer(ctx, tx, p.CustomerID, customerRow{balance: *balance, limit: *limit})
	}
	c, known, err := readCustomer(ctx, tx, p.CustomerID) // see "Balance moves" in balance.go
	switch {
	case err != nil:
		return err
	case !known:
		reason = ReasonUnknownCustomer
	case p.Amount <= 0:
		reason = ReasonInvalidAmount
	case p.Amount > c.limit:
		reason = ReasonOverLimit
	case p.Amount > c.balance:
		reason = ReasonInsufficientFunds
	}

	out := events.PaymentV1{OrderID: p.OrderID, CustomerID: p.CustomerID, Amount: p.Amount, Items: p.Items, Reason: reason}
	if reason != "" {
		inserted, err := insertOrder(ctx, tx, p.OrderID, p.CustomerID, p.Amount, StatusDeclined, 0, reason)
		if err != nil || !inserted {
			return err
		}
		h.count(ctx, tx, "decline")
		h.note(ctx, tx, slog.LevelInfo, "payment: declined", slog.String("reason", reason), slog.Int64("amount", p.Amount))
		return h.emit(ctx, tx, ev, events.PaymentDeclined, out)
	}
	// The order's row and its ledger charge in one statement (one round trip).
	var inserted bool
	if err := tx.QueryRow(ctx, `WITH o AS (
			INSERT INTO payment_orders (order_id, customer_id, amount, status, charged_amount, reason)
			VALUES ($1, $2, $3, $4, $3, '') ON CONFLICT (order_id) DO NOTHING RETURNING order_id
		), l AS (
			INSERT INTO payment_ledger (order_id, kind, customer_id, amount, event_id)
			SELECT order_id, 'charge', $2, $3, $5 FROM o
		)
		SELECT count(*) = 1 FROM o`, p.OrderID, p.CustomerID, p.Amount, StatusAuthorized, ev.ID).Scan(&inserted); err != nil {
		return fmt.Errorf("paymentsvc: record charge: %w", err)
	}
	if !inserted {
		return nil // a concurrent handling of the same order won (as insertOrder)
	}
	if err := changeBalance(ctx, tx, p.CustomerID, -p.Amount); err != nil {
		return fmt.Errorf("paymentsvc: debit: %w", err)
	}
	h.count(ctx, tx, "charge")
	h.moved(ctx, tx, "charge", p.Amount)
	h.note(ctx, tx, slog.LevelInfo, "payment: authorized", slog.Int64("amount", p.Amount))
	out.Reason = ""
	return h.emit(ctx, tx, ev, events.PaymentAuthorized, out)
}

// StockUnavailable refunds a charged order whose stock could not be reserved and emits
// payment.refunded. An order that was not charged, or already refunded, gets nothing.
func (h *Handlers) StockUnavailable(ctx context.Context, tx pgx.Tx, ev event.Event, p events.StockV1) error {
	reason := ReasonStockUnavailable
	if p.Reason != "" {
		reason += ": " + p.Reason
	}
	o, found, err := lockOrder(ctx, tx, p.OrderID)
	if err != nil {
		return err
	}
	if !found || o.status != StatusAuthorized {
		h.note(ctx, tx, slog.LevelInfo, "payment: nothing to refund", slog.String("status", o.status))
		return nil
	}
	return h.refund(ctx, tx, ev, o, reason)
}

// CancelRequested compensates a cancelled order (see the contract on Handlers).
func (h *Handlers) CancelRequested(ctx context.Context, tx pgx.Tx, ev event.Event, p events.OrderCancelRequestedV1) error {
	o, found, err := lockOrder(ctx, tx, p.OrderID)
	if err != nil {
		return err
	}
	if !found {
		// Cancel before order.created: leave a tombstone so the charge never happens,
		// and tell order that nothing was (or will be) charged.
		inserted, err := insertOrder(ctx, tx, p.OrderID, "", 0, StatusCancelled, 0, ReasonCancelled)
		if err != nil {
			return err
		}
		if !inserted { // a concurrent handler created the row; redeliver and decide on it
			return fmt.Errorf("paymentsvc: order %s appeared concurrently", p.OrderID)
		}
		h.count(ctx, tx, "tombstone")
		return h.emit(ctx, tx, ev, events.PaymentDeclined, events.PaymentV1{OrderID: p.OrderID, Reason: ReasonCancelled})
	}
	switch o.status {
	case StatusAuthorized:
		return h.refund(ctx, tx, ev, o, ReasonCancelled)
	case StatusHeld:
		if _, err := tx.Exec(ctx, `UPDATE payment_orders SET status = $2, reason = $3, updated_at = now() WHERE order_id = $1`,
			o.orderID, StatusCancelled, ReasonCancelled); err != nil {
			return fmt.Errorf("paymentsvc: cancel held order: %w", err)
		}
		h.count(ctx, tx, "cancel_held")
		return h.emit(ctx, tx, ev, events.PaymentDeclined, events.PaymentV1{
			OrderID: o.orderID, CustomerID: o.customerID, Amount: o.amount, Reason: ReasonCancelled})
	default: // declined, refunded, cancelled: that event already answered the order
		if !p.Resend() {
			h.note(ctx, tx, slog.LevelInfo, "payment: cancel needs no compensation", slog.String("status", o.status))
			return nil
		}
		// A re-send: the order did not hear the answer; repeat it, moving no money.
		typ, amount := events.PaymentDeclined, o.amount
		if o.status == StatusRefunded {
			typ, amount = events.PaymentRefunded, o.refunded
		}
		reason := o.reason
		if reason == "" {
			reason = ReasonCancelled
		}
		h.count(ctx, tx, "reanswer")
		h.note(ctx, tx, slog.LevelInfo, "payment: re-sent cancel answered again", slog.String("status", o.status),
			slog.Int("attempt", p.Attempt), slog.String("answer", typ))
		return h.emit(ctx, tx, ev, typ, events.PaymentV1{OrderID: o.orderID, CustomerID: o.customerID, Amount: amount, Reason: reason})
	}
}

// OrderOutcome records the outcome the order service announced for an order
// (order.rejected or order.cancelled; order.confirmed too, though the router ignores it)
// for the reconciliation, which
// refunds a charge still held by an order that ended REJECTED or CANCELLED. The first
// outcome of an order is kept; a repeated one changes nothing.
func (h *Handlers) OrderOutcome(ctx context.Context, tx pgx.Tx, ev event.Event, p events.OrderOutcomeV1) error {
	outcome := outcomeOf(ev.Type)
	if _, err := tx.Exec(ctx, `INSERT INTO payment_order_outcomes (order_id, outcome, reason, event_id, correlation_id, checked)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (order_id) DO NOTHING`,
		p.OrderID, outcome, p.Reason, ev.ID, ev.CorrelationID, outcome == "CONFIRMED"); err != nil {
		return fmt.Errorf("paymentsvc: record outcome: %w", err)
	}
	return nil
}

// outcomeOf maps an order outcome event type to the order's final state.
func outcomeOf(typ string) string {
	switch typ {
	case events.OrderConfirmed:
		return "CONFIRMED"
	case events.OrderRejected:
		return "REJECTED"
	}
	return "CANCELLED"
}

type orderRow struct {
	orderID, customerID, status, reason string
	amount, charged, refunded           int64
}

func lockOrder(ctx context.Context, tx pgx.Tx, id string) (orderRow, bool, error) {
	o := orderRow{orderID: id}
	err := tx.QueryRow(ctx, `SELECT customer_id, status, reason, amount, charged_amount, refunded_amount
		FROM payment_orders WHERE order_id = $1 FOR UPDATE`, id).
		Scan(&o.customerID, &o.status, &o.reason, &o.amount, &o.charged, &o.refunded)
	if errors.Is(err, pgx.ErrNoRows) {
		return o, false, nil
	}
	if err != nil {
		return o, false, fmt.Errorf("paymentsvc: lock order: %w", err)
	}
	return o, true, nil
}

// refund gives back what is left to refund of a charged order and emits payment.refunded.
func (h *Handlers) refund(ctx context.Context, tx pgx.Tx, cause event.Event, o orderRow, reason string) error {
	amount := o.charged - o.refunded
	if amount > 0 {
		if err := changeBalance(ctx, tx, o.customerID, amount); err != nil {
			return fmt.Errorf("paymentsvc: credit: %w", err)
		}
		if err := ledger(ctx, tx, o.orderID, "refund", o.customerID, amount, cause.ID); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE payment_orders SET status = $2, refunded_amount = refunded_amount + $3, reason = $4, updated_at = now()
		WHERE order_id = $1`, o.orderID, StatusRefunded, amount, reason); err != nil {
		return fmt.Errorf("paymentsvc: mark refunded: %w", err)
	}
	h.count(ctx, tx, "refund")
	h.moved(ctx, tx, "refund", amount)
	h.note(ctx, tx, slog.LevelInfo, "payment: refunded", slog.Int64("amount", amount), slog.String("reason", reason))
	return h.emit(ctx, tx, cause, events.PaymentRefunded, events.PaymentV1{
		OrderID: o.orderID, CustomerID: o.customerID, Amount: amount, Reason: reason})
}

// insertOrder inserts the order's one row; false means a row already existed (a
// concurrent handling of the same order won), in which case nothing was written.
func insertOrder(ctx context.Context, tx pgx.Tx, id, customer string, amount int64, status string, charged int64, reason string) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO payment_orders (order_id, customer_id, amount, status, charged_amount, reason)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (order_id) DO NOTHING`, id, customer, amount, status, charged, reason)
	if err != nil {
		return false, fmt.Errorf("paymentsvc: record order: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

func ledger(ctx context.Context, tx pgx.Tx, orderID, kind, customer string, amount int64, eventID string) error {
	if _, err := tx.Exec(ctx, `INSERT INTO payment_ledger (order_id, kind, customer_id, amount, event_id) VALUES ($1, $2, $3, $4, $5)`,
		orderID, kind, customer, amount, eventID); err != nil {
		return fmt.Errorf("paymentsvc: ledger %s: %w", kind, err)
	}
	return nil
}

func (h *Handlers) emit(ctx context.Context, tx pgx.Tx, cause event.Event, typ string, payload events.PaymentV1) error {
	var (
		ev  event.Event
		err error
	)
	if typ == events.PaymentAuthorized && h.authV2 {
		v2, _ := events.UpcastPaymentAuthorized(payload) // the same fields, renamed
		ev, err = events.PaymentAuthorizedV2Event.New(payload.OrderID, v2)
	} else {
		ev, err = produces[typ].New(payload.OrderID, payload)
	}
	if err != nil {
		return consumer.Permanent(fmt.Errorf("paymentsvc: build %s: %w", typ, err))
	}
	if err := h.pub.Publish(ctx, tx, events.TopicPayments, ev.CausedBy(cause)); err != nil {
		return err
	}
	return deferBalances(ctx, tx) // balances last, after the outbox rows
}

// Seed inserts customers that do not exist yet; existing rows (and their balances) are
// left alone, so a restart never mints money.
func Seed(ctx context.Context, db migrate.Execer, customers []Customer) error {
	if len(customers) == 0 {
		return nil
	}
	ids := make([]string, len(customers))
	balances := make([]int64, len(customers))
	limits := make([]int64, len(customers))
	for i, c := range customers {
		ids[i], balances[i], limits[i] = c.ID, c.Balance, c.Limit
	}
	_, err := db.Exec(ctx, `INSERT INTO payment_customers (id, balance, charge_limit, initial_balance)
		SELECT id, b, l, b FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS s(id, b, l)
		ON CONFLICT (id) DO NOTHING`, ids, balances, limits)
	if err != nil {
		return fmt.Errorf("paymentsvc: seed customers: %w", err)
	}
	return nil
}
