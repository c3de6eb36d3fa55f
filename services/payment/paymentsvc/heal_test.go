package paymentsvc

import (
	"context"
	"errors"
	"github.com/choreo-saga/choreo/app"
	"log/slog"
	"testing"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/internal/svctest"
)

// A re-sent cancellation refunds nothing more (compensation is keyed on the order, not on
// the event id) but repeats the answer the order service may have missed.
func TestResentCancelIsAnsweredAgainWithoutMovingMoney(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t, nil)
	before := balance(t, pool, "c-1")
	apptest.MustHandle(t, pool, app.Decoded(h.OrderCreated), orderCreated(t, "o-1", "c-1", 1_000))
	for attempt := 1; attempt <= 3; attempt++ {
		apptest.MustHandle(t, pool, app.Decoded(h.CancelRequested), svctest.CancelRequested(t, "o-1", attempt))
	}
	apptest.MustHandle(t, pool, app.Decoded(h.OrderCreated), orderCreated(t, "o-2", "c-poor", 500)) // declined: over limit
	apptest.MustHandle(t, pool, app.Decoded(h.CancelRequested), svctest.CancelRequested(t, "o-2", 1))
	apptest.MustHandle(t, pool, app.Decoded(h.CancelRequested), svctest.CancelRequested(t, "o-2", 2))

	var got []emitted
	for _, ev := range outboxEvents(t, pool) {
		p := apptest.DecodeData[events.PaymentV1](t, ev)
		got = append(got, emitted{ev.Subject + " " + ev.Type, p.Reason})
		if ev.Type == events.PaymentRefunded && p.Amount != 1_000 {
			t.Errorf("refund event amount %d, want 1000", p.Amount)
		}
	}
	want := []emitted{
		{"o-1 " + events.PaymentAuthorized, ""},
		{"o-1 " + events.PaymentRefunded, ReasonCancelled}, // attempt 1: the refund
		{"o-1 " + events.PaymentRefunded, ReasonCancelled}, // attempts 2 and 3: the answer again
		{"o-1 " + events.PaymentRefunded, ReasonCancelled},
		{"o-2 " + events.PaymentDeclined, ReasonOverLimit}, // attempt 1 needs no answer; attempt 2 repeats it
		{"o-2 " + events.PaymentDeclined, ReasonOverLimit},
	}
	if len(got) != len(want) {
		t.Fatalf("emitted %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %v, want %v", i, got[i], want[i])
		}
	}
	a := audit(t, pool) // at most one charge and one refund per order
	if o := a.Orders["o-1"]; o.Charges != 1 || o.Refunds != 1 || o.Refunded != 1_000 {
		t.Errorf("o-1 %+v", o)
	}
	if b := balance(t, pool, "c-1"); b != before {
		t.Errorf("balance %d, want %d back", b, before)
	}
}

// Only the order service announces orders: an order.created from another source is
// refused (dead-lettered with the reason) and charges nothing; an order.created for an
// order that already ended charges nothing either.
func TestOnlyAnnouncedOrdersAreCharged(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t, nil)
	forged := apptest.NewEvent(t, events.SourceInventory, events.OrderCreated, "o-f", events.OrderCreatedV1{
		OrderID: "o-f", CustomerID: "c-1", Amount: 1_000, Items: []events.Item{{SKU: "sku-1", Qty: 1}}})
	err := apptest.Handle(pool, app.Decoded(h.OrderCreated), forged)
	if !errors.Is(err, ErrNotAnnounced) || consumer.Retryable(err) {
		t.Fatalf("forged order.created: %v; want permanent ErrNotAnnounced", err)
	}
	apptest.MustHandle(t, pool, app.Decoded(h.OrderOutcome), svctest.Outcome(t, events.OrderRejected, "o-late"))
	apptest.MustHandle(t, pool, app.Decoded(h.OrderCreated), orderCreated(t, "o-late", "c-1", 1_000))
	if n := len(outboxEvents(t, pool)); n != 0 {
		t.Fatalf("%d events emitted", n)
	}
	a := audit(t, pool)
	if _, ok := a.Orders["o-f"]; ok {
		t.Errorf("forged order recorded: %+v", a.Orders["o-f"])
	}
	if o := a.Orders["o-late"]; o.Status != StatusCancelled || o.Charges != 0 {
		t.Errorf("late order.created of a rejected order: %+v", o)
	}
	if b := balance(t, pool, "c-1"); b != 100_000 {
		t.Errorf("balance %d, want untouched", b)
	}
}

// The reconciliation refunds a charge held by an order that ended REJECTED or CANCELLED,
// once, through the ledger and a payment.refunded; confirmed and already refunded orders
// are left alone.
func TestReconciliationRefundsUnneededCharges(t *testing.T) {
	ctx := context.Background()
	pool := newDB(t)
	m := svctest.NewMeter()
	h, err := NewHandlers(nil, newOutbox(t), Config{Customers: testCustomers}, slog.New(slog.DiscardHandler), m.Provider)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"o-rejected", "o-cancelled", "o-confirmed", "o-refunded"} {
		apptest.MustHandle(t, pool, app.Decoded(h.OrderCreated), orderCreated(t, o, "c-2", 1_000))
	}
	apptest.MustHandle(t, pool, app.Decoded(h.CancelRequested), cancelRequested(t, "o-refunded"))
	apptest.MustHandle(t, pool, app.Decoded(h.OrderOutcome), svctest.Outcome(t, events.OrderRejected, "o-rejected"))
	apptest.MustHandle(t, pool, app.Decoded(h.OrderOutcome), svctest.Outcome(t, events.OrderCancelled, "o-cancelled"))
	apptest.MustHandle(t, pool, app.Decoded(h.OrderOutcome), svctest.Outcome(t, events.OrderConfirmed, "o-confirmed"))
	apptest.MustHandle(t, pool, app.Decoded(h.OrderOutcome), svctest.Outcome(t, events.OrderCancelled, "o-refunded"))
	apptest.MustHandle(t, pool, app.Decoded(h.OrderOutcome), svctest.Outcome(t, events.OrderCancelled, "o-refunded")) // repeated
	if _, err := pool.Exec(ctx, `DELETE FROM choreo_outbox`); err != nil {
		t.Fatal(err)
	}

	svctest.ReconcileTwice(t, NewReconciler(pool, h).ReconcileOnce, 2)
	got := map[string]string{}
	for _, ev := range outboxEvents(t, pool) {
		p := apptest.DecodeData[events.PaymentV1](t, ev)
		got[ev.Subject] = ev.Type + " " + p.Reason
		if ev.CausationID == "" || ev.CorrelationID != ev.Subject || p.Amount != 1_000 {
			t.Errorf("correction %+v %+v", ev, p)
		}
	}
	want := map[string]string{
		"o-rejected":  events.PaymentRefunded + " reconciled: order REJECTED",
		"o-cancelled": events.PaymentRefunded + " reconciled: order CANCELLED",
	}
	if len(got) != len(want) || got["o-rejected"] != want["o-rejected"] || got["o-cancelled"] != want["o-cancelled"] {
		t.Fatalf("corrections %v, want %v", got, want)
	}
	a := audit(t, pool)
	for id, st := range map[string]string{"o-rejected": StatusRefunded, "o-cancelled": StatusRefunded,
		"o-confirmed": StatusAuthorized, "o-refunded": StatusRefunded} {
		if o := a.Orders[id]; o.Status != st || o.Refunds > 1 {
			t.Errorf("%s: %+v, want %s", id, o, st)
		}
	}
	if b := balance(t, pool, "c-2"); b != 100_000-1_000 {
		t.Errorf("balance %d, want only the confirmed order charged", b)
	}
	kinds := m.Sum(t, MetricReconciliations, "kind")
	if kinds["refund_rejected"] != 1 || kinds["refund_cancelled"] != 1 || len(kinds) != 2 {
		t.Errorf("%s = %v", MetricReconciliations, kinds)
	}
}
