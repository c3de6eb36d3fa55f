package inventorysvc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/services/events"
)

// Sentinel errors.
var (
	// ErrInvalidEvent is returned for a held payment.authorized (kept while its
	// order.created had not arrived) whose stored payload no longer decodes. The error
	// also matches event.ErrMalformed, so the consumer dead-letters the event at once.
	ErrInvalidEvent = errors.New("inventorysvc: invalid event")
	// ErrNotAnnounced is returned (permanent: dead-lettered) for an order.created whose
	// source is not the order service: only the order service announces orders.
	ErrNotAnnounced = errors.New("inventorysvc: order not announced by the order service")
	// ErrMismatch is returned (with consumer.Reject: dead-lettered with reason
	// events.ReasonMismatch) for a payment.authorized whose items, customer or amount
	// differ from the order as the order service announced it. Nothing is reserved.
	ErrMismatch = errors.New("inventorysvc: payment does not match the announced order")
)

// Reservation statuses (inventory_reservations.status).
const (
	StatusReserved    = "reserved"
	StatusCommitted   = "committed"
	StatusReleased    = "released"
	StatusExpired     = "expired"
	StatusUnavailable = "unavailable"
	StatusCancelled   = "cancelled"
)

// Reasons carried in StockV1.Reason.
const (
	ReasonOrderCancelled   = "order cancelled"
	ReasonInsufficient     = "insufficient stock"
	ReasonUnknownSKU       = "unknown sku"
	ReasonInvalidItems     = "invalid items"
	ReasonCancelled        = "cancelled"
	ReasonNothingReserved  = "nothing reserved"
	ReasonAlreadyCommitted = "already committed"
	ReasonExpired          = "reservation expired"
	// ReasonOrderEnded answers a payment.authorized of an order that already ended
	// REJECTED or CANCELLED (followed by the outcome).
	ReasonOrderEnded = "order already"
	// ReasonReconciled prefixes the reason of a release made by the reconciliation.
	ReasonReconciled = "reconciled"
)

// Handlers are the inventory service's business handlers (consumer.TxHandler functions).
// Each runs inside the transaction opened by the consumer's Idempotent middleware.
//
// Cancellation contract (what the order service relies on): for an order's first
// order.cancel_requested, inventory emits exactly one stock.released, listing the items
// it actually released (empty if it held nothing), and remembers the cancellation: a
// payment.authorized that arrives later (it travels on another topic, so it can) reserves
// nothing and is answered with stock.unavailable, reason "order cancelled". A re-sent
// cancellation (events.OrderCancelRequestedV1.Resend) releases nothing more (compensation
// is keyed on the order, not on the event id) and repeats that stock.released, since the
// order service may have missed it.
//
// Orphans (see docs/reliability.md, "Sagas that heal"): inventory takes stock only for
// orders the order service announced (an order.created from the order service) and
// that have not ended REJECTED or CANCELLED. A payment.authorized for an order not
// announced yet is held, with no effect, and reserved when order.created arrives (the
// two travel on different topics, so it can overtake it); Reconciler reports one held
// too long as an orphan, and releases a reservation of an order that ended REJECTED or
// CANCELLED.
//
// Cross-checks: inventory records the items, customer and amount of each order.created
// and reserves only for a payment.authorized that carries the same (see
// PaymentAuthorized); the order service checks the payment and the reservation against
// its order in turn, and cancels an order that a mismatching event tried to move.
type Handlers struct {
	pub         app.Publisher
	outbox      *outbox.Outbox
	ttl         time.Duration
	orphanAfter time.Duration
	log         *slog.Logger
	ops         metric.Int64Counter
	fixes       metric.Int64Counter
}

// NewHandlers returns the handlers for cfg. They publish with pub (the service's
// *app.App; nil: app.OutboxPublisher on o); the sweeper and the reconciliation begin
// their transactions on o. logger and mp may be nil.
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
	ops, err := mp.Meter("github.com/choreo-saga/choreo/services/inventory").Int64Counter("inventory.operations",
		metric.WithDescription("Inventory decisions by operation (reserve, unavailable, commit, release, expire, tombstone, oversold, hold_unannounced, reanswer)."))
	if err != nil {
		return nil, fmt.Errorf("inventorysvc: metrics: %w", err)
	}
	fixes, err := mp.Meter("github.com/choreo-saga/choreo/services/inventory").Int64Counter(MetricReconciliations,
		metric.WithUnit("{correction}"),
		metric.WithDescription("Corrections and reports of the reconciliation, by kind (release_rejected, release_cancelled, orphan_authorization)."))
	if err != nil {
		return nil, fmt.Errorf("inventorysvc: metrics: %w", err)
	}
	ttl := cfg.ReservationTTL
	if ttl <= 0 {
		ttl = DefaultReservationTTL
	}
	orphan := cfg.OrphanAfter
	if orphan <= 0 {
		orphan = DefaultOrphanAfter
	}
	return &Handlers{pub: pub, outbox: o, ttl: ttl, orphanAfter: orphan, log: logger, ops: ops, fixes: fixes}, nil
}

// MetricReconciliations is the counter of the reconciliation's corrections, by kind.
const MetricReconciliations = "inventory.reconciliations"

// Topics are the topics the inventory service consumes.
var Topics = []string{events.TopicOrders, events.TopicPayments}

// OrderCreated records that the order service announced the order, and reserves for a
// payment.authorized that was held because it arrived first. An order.created from any
// other source is refused with ErrNotAnnounced (dead-lettered).
func (h *Handlers) OrderCreated(ctx context.Context, tx pgx.Tx, ev event.Event, p events.OrderCreatedV1) error {
	if ev.Source != events.SourceOrder {
		return consumer.Permanent(fmt.Errorf("%w: order.created %s from source %q", ErrNotAnnounced, ev.ID, ev.Source))
	}
	var (
		heldID, heldCorrelation, outcome *string
		heldData                         []byte
		reserved                         bool
	)
	// Whether the order has a reservation is read (without a lock, see readOrder) for a
	// held payment: reserveNew then needs no round trip to lock a reservation that is
	// not there.
	// The order as announced is kept (its first announcement): a payment.authorized
	// reserves only for it (see mismatch).
	err := tx.QueryRow(ctx, `INSERT INTO inventory_orders (order_id, announced, announced_items, announced_customer, announced_amount)
		VALUES ($1, true, $2, $3, $4)
		ON CONFLICT (order_id) DO UPDATE SET announced = true,
			announced_items = coalesce(inventory_orders.announced_items, $2),
			announced_customer = coalesce(inventory_orders.announced_customer, $3),
			announced_amount = coalesce(inventory_orders.announced_amount, $4), updated_at = now()
		RETURNING held_event_id, held_correlation_id, held_data, outcome,
			held_event_id IS NOT NULL AND EXISTS (SELECT 1 FROM inventory_reservations r WHERE r.order_id = $1)`,
		p.OrderID, nonNil(p.Items), p.CustomerID, p.Amount).Scan(&heldID, &heldCorrelation, &heldData, &outcome, &reserved)
	if err != nil {
		return fmt.Errorf("inventorysvc: record announced order: %w", err)
	}
	if heldID == nil {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE inventory_orders SET held_event_id = NULL, held_correlation_id = NULL,
		held_data = NULL, held_at = NULL WHERE order_id = $1`, p.OrderID); err != nil {
		return fmt.Errorf("inventorysvc: release held payment: %w", err)
	}
	held := event.Event{ID: *heldID, CorrelationID: *heldCorrelation, Type: events.PaymentAuthorized,
		Source: events.SourcePayment, Subject: p.OrderID, Data: heldData}
	pa, err := heldPayment(held)
	if err != nil {
		return consumer.Permanent(fmt.Errorf("%w: held payment: %w", ErrInvalidEvent, err))
	}
	announcedOrder := orderState{items: nonNil(p.Items), customer: &p.CustomerID, amount: &p.Amount}
	if why := announcedOrder.mismatch(pa); why != "" {
		// The held payment is not for the order announced: it reserves nothing.
		h.mismatched(ctx, tx, held, why)
		return nil
	}
	h.note(ctx, tx, slog.LevelInfo, "inventory: order announced, reserving for its held payment", slog.String("held_event_id", held.ID))
	if !reserved {
		return h.reserveNew(ctx, tx, held, pa, outcome)
	}
	return h.reserve(ctx, tx, held, pa, outcome)
}

// heldPayment decodes a held payment.authorized: held at v2 (upcast by the consumer when
// it arrived at v1), or at v1 by an instance from before v2. The two versions' required
// fields differ, so the payload says which it is.
func heldPayment(held event.Event) (events.PaymentAuthorizedV2, error) {
	p, err := contract.Decode[events.PaymentAuthorizedV2](held)
	if err == nil {
		return p, nil
	}
	v1, err1 := contract.Decode[events.PaymentV1](held)
	if err1 != nil {
		return events.PaymentAuthorizedV2{}, err
	}
	return events.UpcastPaymentAuthorized(v1)
}

// OrderOutcome records the outcome the order service announced (order.rejected,
// order.cancelled) for the reconciliation, which releases a reservation the order no
// longer needs. The first outcome of an order is kept.
func (h *Handlers) OrderOutcome(ctx context.Context, tx pgx.Tx, ev event.Event, p events.OrderOutcomeV1) error {
	return recordOutcome(ctx, tx, p.OrderID, ev)
}

// recordOutcomeSQL keeps an order's first announced outcome: $1 order, $2 outcome,
// $3 event id, $4 correlation id, $5 checked.
const recordOutcomeSQL = `INSERT INTO inventory_orders (order_id, outcome, outcome_event_id, outcome_correlation_id, checked)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (order_id) DO UPDATE SET outcome = $2, outcome_event_id = $3, outcome_correlation_id = $4,
			checked = $5, updated_at = now()
		WHERE inventory_orders.outcome IS NULL`

func recordOutcome(ctx context.Context, tx pgx.Tx, id string, ev event.Event) error {
	outcome := "CANCELLED"
	switch ev.Type {
	case events.OrderConfirmed:
		outcome = "CONFIRMED"
	case events.OrderRejected:
		outcome = "REJECTED"
	}
	if _, err := tx.Exec(ctx, recordOutcomeSQL, id, outcome, ev.ID, ev.CorrelationID, outcome == "CONFIRMED"); err != nil {
		return fmt.Errorf("inventorysvc: record outcome: %w", err)
	}
	return nil
}

// count counts operation op once tx has committed (consumer.AfterCommit): a decision
// whose transaction rolls back, or whose COMMIT is lost and retried, counts once.
func (h *Handlers) count(ctx context.Context, tx pgx.Tx, op string) {
	consumer.AfterCommit(ctx, tx, func() { h.ops.Add(ctx, 1, metric.WithAttributes(attribute.String("op", op))) })
}

// note logs msg once tx has committed: a log line says what happened, never what a
// rolled-back transaction attempted.
func (h *Handlers) note(ctx context.Context, tx pgx.Tx, level slog.Level, msg string, args ...any) {
	consumer.AfterCommit(ctx, tx, func() { h.log.Log(ctx, level, msg, args...) })
}

// PaymentAuthorized reserves all of the order's items or none: it checks every
// quantity and takes the stock in the handler's transaction, with one conditional UPDATE
// (available stays >= 0) on rows locked in SKU order; in the consumer's transactions that
// UPDATE is the last statement before COMMIT, for the changes of the whole batch (see
// take and "Stock moves" in stock.go).
// It emits stock.reserved or stock.unavailable. For an order the order service has not
// announced yet it does nothing but hold the event until order.created (see Handlers).
// A payment whose items, customer or amount differ from the order as announced reserves
// nothing and is dead-lettered as events.ReasonMismatch (ErrMismatch); a held one that
// differs is dropped when order.created arrives, counted and logged as "mismatch".
func (h *Handlers) PaymentAuthorized(ctx context.Context, tx pgx.Tx, ev event.Event, p events.PaymentAuthorizedV2) error {
	// The row lock orders this handler with OrderCreated of the same order. The row of an
	// announced order exists: in the common case one round trip reads and locks it, reads
	// whether the order has a reservation, and reads the stock of its SKUs (see
	// readOrder).
	var (
		announced, held bool
		outcome         *string
		st              orderState
	)
	for created := false; ; created = true {
		var err error
		st, err = readOrder(ctx, tx, p)
		if err == nil {
			break
		}
		if !errors.Is(err, pgx.ErrNoRows) || created {
			return err
		}
		// Not announced yet (payment.authorized overtook order.created, which travels on
		// another topic): the order's row is created holding the event, in one statement.
		// If order.created created the row first, the loop reads it again.
		tag, err := tx.Exec(ctx, `INSERT INTO inventory_orders (order_id, held_event_id, held_correlation_id, held_data, held_at)
			VALUES ($1, $2, $3, $4, now()) ON CONFLICT (order_id) DO NOTHING`, p.OrderID, ev.ID, ev.CorrelationID, ev.Data)
		if err != nil {
			return fmt.Errorf("inventorysvc: hold payment: %w", err)
		}
		if tag.RowsAffected() == 1 {
			h.held(ctx, tx, ev)
			return nil
		}
	}
	announced, held, outcome = st.announced, st.held, st.outcome
	if !announced {
		if held {
			h.note(ctx, tx, slog.LevelInfo, "inventory: payment of an unannounced order already held")
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE inventory_orders SET held_event_id = $2, held_correlation_id = $3, held_data = $4,
			held_at = now(), updated_at = now() WHERE order_id = $1`, p.OrderID, ev.ID, ev.CorrelationID, ev.Data); err != nil {
			return fmt.Errorf("inventorysvc: hold payment: %w", err)
		}
		h.held(ctx, tx, ev)
		return nil
	}
	if why := st.mismatch(p); why != "" {
		h.mismatched(ctx, tx, ev, why)
		return consumer.Reject(consumer.ReasonMismatch, fmt.Errorf("%w: %s", ErrMismatch, why))
	}
	if !st.reserved {
		return h.reserveNew(ctx, tx, ev, p, outcome)
	}
	return h.reserve(ctx, tx, ev, p, outcome)
}

// mismatched counts and logs a payment.authorized that does not match its order.
func (h *Handlers) mismatched(ctx context.Context, tx pgx.Tx, ev event.Event, why string) {
	h.count(ctx, tx, "mismatch")
	h.note(ctx, tx, slog.LevelWarn, "inventory: payment.authorized does not match the order announced; nothing reserved",
		slog.String("event_id", ev.ID), slog.String("mismatch", why))
}

// held counts and logs a payment.authorized held until its order is announced.
func (h *Handlers) held(ctx context.Context, tx pgx.Tx, ev event.Event) {
	h.count(ctx, tx, "hold_unannounced")
	h.note(ctx, tx, slog.LevelWarn, "inventory: payment.authorized for an order not announced by the order service; held until order.created",
		slog.String("event_id", ev.ID))
}

// orderState is what PaymentAuthorized reads of an order in its first round trip.
type orderState struct {
	announced, held bool
	outcome         *string
	// reserved: the order has a row in inventory_reservations (read without a lock).
	reserved bool
	// items, customer and amount are the order as announced (nil items: not known, for
	// an order announced before they were recorded).
	items    []events.Item
	customer *string
	amount   *int64
}

// mismatch returns why payment p is not for the order as announced ("" if it is): other
// items (merged by SKU), another customer or another amount. An order whose announced
// items are not known is not checked.
func (st orderState) mismatch(p events.PaymentAuthorizedV2) string {
	switch {
	case st.items == nil:
		return ""
	case !events.SameItems(st.items, p.Items):
		return fmt.Sprintf("items %v, announced %v", p.Items, st.items)
	case st.customer != nil && *st.customer != p.CustomerID:
		return fmt.Sprintf("customer %q, announced %q", p.CustomerID, *st.customer)
	case st.amount != nil && *st.amount != p.AmountCents:
		return fmt.Sprintf("amount %d, announced %d", p.AmountCents, *st.amount)
	}
	return ""
}

// readOrder reads and locks (FOR UPDATE) the order's inventory_orders row, reads whether
// it has a reservation and, in a consumer's transaction, reads the stock of the payment's
// SKUs that the transaction has not read yet (without a lock, as take does): one round
// trip. It returns an error wrapping pgx.ErrNoRows when the order has no row.
//
// The reservation is read without its row lock: if there is none, the reservation's
// insert (ON CONFLICT DO NOTHING) is what detects a concurrent one, as it did when the
// lock was taken on a missing row (which locks nothing); if there is one, reserve locks
// it and decides on the locked row.
func readOrder(ctx context.Context, tx pgx.Tx, p events.PaymentAuthorizedV2) (orderState, error) {
	var st orderState
	b := &pgx.Batch{}
	// The stock first: its levels are kept even when the order has no row yet (a batch
	// stops reading results at the first error), so the retry does not read them again.
	if items, reason := normalize(p.Items); reason == "" {
		skus, _ := split(items)
		pending(ctx, tx).queueLoad(b, p.OrderID, skus)
	}
	b.Queue(`SELECT o.announced, o.held_event_id IS NOT NULL, o.outcome,
			EXISTS (SELECT 1 FROM inventory_reservations r WHERE r.order_id = o.order_id),
			o.announced_items, o.announced_customer, o.announced_amount
		FROM inventory_orders o WHERE o.order_id = $1 FOR UPDATE OF o`, p.OrderID).QueryRow(func(row pgx.Row) error {
		return row.Scan(&st.announced, &st.held, &st.outcome, &st.reserved, &st.items, &st.customer, &st.amount)
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return st, err
		}
		return st, fmt.Errorf("inventorysvc: read order: %w", err)
	}
	return st, nil
}

// reserve is PaymentAuthorized for an announced order; ev is the payment.authorized and
// outcome the order's announced outcome, if any.
func (h *Handlers) reserve(ctx context.Context, tx pgx.Tx, ev event.Event, p events.PaymentAuthorizedV2, outcome *string) error {
	r, found, err := lockReservation(ctx, tx, p.OrderID)
	if err != nil {
		return err
	}
	if found {
		if r.status != StatusCancelled {
			h.note(ctx, tx, slog.LevelInfo, "inventory: order already decided, nothing to do", slog.String("status", r.status))
			return nil
		}
		// Cancelled before the payment reached us: reserve nothing.
		if err := setStatus(ctx, tx, p.OrderID, StatusUnavailable, ReasonOrderCancelled); err != nil {
			return err
		}
		h.count(ctx, tx, "unavailable")
		return h.emit(ctx, tx, ev, events.StockUnavailable, events.StockV1{OrderID: p.OrderID, Items: nonNil(p.Items), Reason: ReasonOrderCancelled})
	}
	return h.reserveNew(ctx, tx, ev, p, outcome)
}

// reserveNew is reserve for an order that has no reservation (as last read): it takes
// the stock or decides it is unavailable, and records the decision; a reservation that
// appeared concurrently fails the record's insert, and the retry decides on it.
func (h *Handlers) reserveNew(ctx context.Context, tx pgx.Tx, ev event.Event, p events.PaymentAuthorizedV2, outcome *string) error {
	var err error
	items, reason := normalize(p.Items)
	if outcome != nil && *outcome != "CONFIRMED" {
		reason = ReasonOrderEnded + " " + *outcome // it needs no stock any more
	}
	if reason == "" {
		reason, err = take(ctx, tx, p.OrderID, items)
		if err != nil {
			return err
		}
	}
	if reason != "" {
		if err := insertReservation(ctx, tx, p.OrderID, StatusUnavailable, reason, nil); err != nil {
			return err
		}
		h.count(ctx, tx, "unavailable")
		h.note(ctx, tx, slog.LevelInfo, "inventory: stock unavailable", slog.String("reason", reason))
		return h.emit(ctx, tx, ev, events.StockUnavailable, events.StockV1{OrderID: p.OrderID, Items: nonNil(p.Items), Reason: reason})
	}
	expires := time.Now().Add(h.ttl)
	if err := insertReserved(ctx, tx, p.OrderID, &expires, items); err != nil {
		return err
	}
	h.count(ctx, tx, "reserve")
	h.note(ctx, tx, slog.LevelInfo, "inventory: reserved", slog.Int("skus", len(items)), slog.Time("expires_at", expires))
	return h.emit(ctx, tx, ev, events.StockReserved, events.StockV1{OrderID: p.OrderID, Items: items})
}

// OrderConfirmed commits the order's reservation: the stock is sold and no longer
// expires. A reservation that already expired takes its stock again if it can; if it
// cannot, the oversold order is logged at error level and counted ("oversold").
func (h *Handlers) OrderConfirmed(ctx context.Context, tx pgx.Tx, ev event.Event, p events.OrderOutcomeV1) error {
	// The usual case in one round trip: record the outcome and commit a held
	// reservation; anything else is decided below on the locked reservation.
	var committed bool
	if err := tx.QueryRow(ctx, `WITH o AS (`+recordOutcomeSQL+`), c AS (
			UPDATE inventory_reservations SET status = $6, reason = '', updated_at = now(), expires_at = NULL
			WHERE order_id = $1 AND status = $7 RETURNING 1
		)
		SELECT count(*) = 1 FROM c`, p.OrderID, "CONFIRMED", ev.ID, ev.CorrelationID, true,
		StatusCommitted, StatusReserved).Scan(&committed); err != nil {
		return fmt.Errorf("inventorysvc: record outcome and commit: %w", err)
	}
	if committed {
		h.count(ctx, tx, "commit")
		return nil
	}
	r, found, err := lockReservation(ctx, tx, p.OrderID)
	if err != nil {
		return err
	}
	switch {
	case !found:
		h.note(ctx, tx, slog.LevelWarn, "inventory: order confirmed without a reservation")
		return nil
	case r.status == StatusReserved:
		h.count(ctx, tx, "commit")
		return setStatus(ctx, tx, p.OrderID, StatusCommitted, "")
	case r.status == StatusExpired:
		items, err := reservationItems(ctx, tx, p.OrderID)
		if err != nil {
			return err
		}
		reason, err := take(ctx, tx, p.OrderID, items)
		if err != nil {
			return err
		}
		if reason != "" {
			h.count(ctx, tx, "oversold")
			h.note(ctx, tx, slog.LevelError, "inventory: confirmed order's reservation expired and its stock is gone",
				slog.String("reason", reason))
			return nil
		}
		if err := deferApply(ctx, tx, pending(ctx, tx)); err != nil {
			return err
		}
		h.count(ctx, tx, "commit")
		return setStatus(ctx, tx, p.OrderID, StatusCommitted, "re-reserved after expiry")
	default:
		h.note(ctx, tx, slog.LevelWarn, "inventory: order confirmed in unexpected reservation state", slog.String("status", r.status))
		return nil
	}
}

// CancelRequested releases the order's reservation, if it holds one, and answers the
// cancel with one stock.released (see the contract on Handlers).
func (h *Handlers) CancelRequested(ctx context.Context, tx pgx.Tx, ev event.Event, p events.OrderCancelRequestedV1) error {
	r, found, err := lockReservation(ctx, tx, p.OrderID)
	if err != nil {
		return err
	}
	released := []events.Item{}
	reason := ReasonNothingReserved
	switch {
	case !found:
		if err := insertReservation(ctx, tx, p.OrderID, StatusCancelled, ReasonOrderCancelled, nil); err != nil {
			return err
		}
		h.count(ctx, tx, "tombstone")
	case r.cancelSeen && !p.Resend():
		h.note(ctx, tx, slog.LevelInfo, "inventory: cancel already answered")
		return nil
	case r.cancelSeen:
		// A re-send: the order did not hear the answer; repeat it, moving no stock.
		switch r.status {
		case StatusReleased:
			if released, err = reservationItems(ctx, tx, p.OrderID); err != nil {
				return err
			}
			reason = ReasonCancelled
		case StatusCommitted:
			reason = ReasonAlreadyCommitted
		}
		h.count(ctx, tx, "reanswer")
		h.note(ctx, tx, slog.LevelInfo, "inventory: re-sent cancel answered again", slog.String("status", r.status), slog.Int("attempt", p.Attempt))
		return h.emit(ctx, tx, ev, events.StockReleased, events.StockV1{OrderID: p.OrderID, Items: released, Reason: reason})
	case r.status == StatusReserved:
		items, err := reservationItems(ctx, tx, p.OrderID)
		if err != nil {
			return err
		}
		if err := give(ctx, tx, p.OrderID, items); err != nil {
			return err
		}
		if err := setStatus(ctx, tx, p.OrderID, StatusReleased, ReasonCancelled); err != nil {
			return err
		}
		released, reason = items, ReasonCancelled
		h.count(ctx, tx, "release")
	case r.status == StatusCommitted:
		reason = ReasonAlreadyCommitted
		h.note(ctx, tx, slog.LevelWarn, "inventory: cancel of a committed order; stock stays sold")
	}
	if _, err := tx.Exec(ctx, `UPDATE inventory_reservations SET cancel_seen = true, updated_at = now() WHERE order_id = $1`, p.OrderID); err != nil {
		return fmt.Errorf("inventorysvc: mark cancel: %w", err)
	}
	return h.emit(ctx, tx, ev, events.StockReleased, events.StockV1{OrderID: p.OrderID, Items: released, Reason: reason})
}

// normalize merges lines of the same SKU and sorts by SKU; a reason is returned for
// items that cannot be reserved at all.
func normalize(in []events.Item) ([]events.Item, string) {
	if len(in) == 0 {
		return nil, ReasonInvalidItems
	}
	sum := map[string]int{}
	for _, it := range in {
		if it.SKU == "" || it.Qty <= 0 {
			return nil, ReasonInvalidItems
		}
		sum[it.SKU] += it.Qty
	}
	out := make([]events.Item, 0, len(sum))
	for sku, qty := range sum {
		out = append(out, events.Item{SKU: sku, Qty: qty})
	}
	slices.SortFunc(out, func(a, b events.Item) int { return cmp.Compare(a.SKU, b.SKU) })
	return out, ""
}

func split(items []events.Item) ([]string, []int64) {
	skus := make([]string, len(items))
	qtys := make([]int64, len(items))
	for i, it := range items {
		skus[i], qtys[i] = it.SKU, int64(it.Qty)
	}
	return skus, qtys
}

type reservation struct {
	status     string
	cancelSeen bool
}

func lockReservation(ctx context.Context, tx pgx.Tx, id string) (reservation, bool, error) {
	var r reservation
	err := tx.QueryRow(ctx, `SELECT status, cancel_seen FROM inventory_reservations WHERE order_id = $1 FOR UPDATE`, id).
		Scan(&r.status, &r.cancelSeen)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("inventorysvc: lock reservation: %w", err)
	}
	return r, true, nil
}

func insertReservation(ctx context.Context, tx pgx.Tx, id, status, reason string, expires *time.Time) error {
	tag, err := tx.Exec(ctx, `INSERT INTO inventory_reservations (order_id, status, reason, expires_at)
		VALUES ($1, $2, $3, $4) ON CONFLICT (order_id) DO NOTHING`, id, status, reason, expires)
	if err != nil {
		return fmt.Errorf("inventorysvc: record reservation: %w", err)
	}
	if tag.RowsAffected() != 1 {
		// A concurrent handling of the same order committed first: roll back (with the
		// stock taken) and let the retry see its decision.
		return fmt.Errorf("inventorysvc: reservation of order %s appeared concurrently", id)
	}
	return nil
}

// insertReserved records a reservation of items that holds stock until expires, and
// its items, in one statement (one round trip). Like insertReservation it fails when the
// order's reservation appeared concurrently.
func insertReserved(ctx context.Context, tx pgx.Tx, id string, expires *time.Time, items []events.Item) error {
	skus, qtys := split(items)
	var inserted bool
	err := tx.QueryRow(ctx, `WITH r AS (
			INSERT INTO inventory_reservations (order_id, status, reason, expires_at)
			VALUES ($1, $2, '', $3) ON CONFLICT (order_id) DO NOTHING RETURNING order_id
		), i AS (
			INSERT INTO inventory_reservation_items (order_id, sku, qty)
			SELECT r.order_id, x.sku, x.qty FROM r, unnest($4::text[], $5::bigint[]) AS x(sku, qty)
		)
		SELECT count(*) = 1 FROM r`, id, StatusReserved, expires, skus, qtys).Scan(&inserted)
	if err != nil {
		return fmt.Errorf("inventorysvc: record reservation: %w", err)
	}
	if !inserted {
		// As insertReservation: roll back (with the stock taken) and let the retry see
		// the concurrent decision.
		return fmt.Errorf("inventorysvc: reservation of order %s appeared concurrently", id)
	}
	return nil
}

func reservationItems(ctx context.Context, tx pgx.Tx, id string) ([]events.Item, error) {
	rows, err := tx.Query(ctx, `SELECT sku, qty FROM inventory_reservation_items WHERE order_id = $1 ORDER BY sku`, id)
	if err != nil {
		return nil, fmt.Errorf("inventorysvc: read reservation items: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (events.Item, error) {
		var it events.Item
		err := r.Scan(&it.SKU, &it.Qty)
		return it, err
	})
	if err != nil {
		return nil, fmt.Errorf("inventorysvc: read reservation items: %w", err)
	}
	return nonNil(items), nil
}

func setStatus(ctx context.Context, tx pgx.Tx, id, status, reason string) error {
	if _, err := tx.Exec(ctx, `UPDATE inventory_reservations SET status = $2, reason = $3, updated_at = now(),
		expires_at = CASE WHEN $2 = 'reserved' THEN expires_at END WHERE order_id = $1`, id, status, reason); err != nil {
		return fmt.Errorf("inventorysvc: set reservation %s: %w", status, err)
	}
	return nil
}

func (h *Handlers) emit(ctx context.Context, tx pgx.Tx, cause event.Event, typ string, payload events.StockV1) error {
	ev, err := produces[typ].New(payload.OrderID, payload)
	if err != nil {
		return consumer.Permanent(fmt.Errorf("inventorysvc: build %s: %w", typ, err))
	}
	if cause.ID != "" {
		ev = ev.CausedBy(cause)
	}
	if err := h.pub.Publish(ctx, tx, events.TopicInventory, ev); err != nil {
		return err
	}
	return deferApply(ctx, tx, pending(ctx, tx)) // stock last, after the outbox rows
}

func nonNil(items []events.Item) []events.Item {
	if items == nil {
		return []events.Item{}
	}
	return items
}

// Seed inserts SKUs that do not exist yet; existing rows are left alone, so a restart
// never creates stock out of nothing. Then it spreads the stock not spread yet over the
// SKUs' shards (see StockShards): this also upgrades a database of an older version.
func Seed(ctx context.Context, db migrate.Execer, stock []Stock) error {
	if len(stock) == 0 {
		return nil
	}
	skus := make([]string, len(stock))
	qtys := make([]int64, len(stock))
	for i, s := range stock {
		skus[i], qtys[i] = s.SKU, s.Qty
	}
	if _, err := db.Exec(ctx, `INSERT INTO inventory_stock (sku, initial_qty, available)
		SELECT sku, q, q FROM unnest($1::text[], $2::bigint[]) AS s(sku, q) ON CONFLICT (sku) DO NOTHING`, skus, qtys); err != nil {
		return fmt.Errorf("inventorysvc: seed stock: %w", err)
	}
	return spreadStock(ctx, db)
}
