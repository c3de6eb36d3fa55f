package inventorysvc

import (
	"context"
	"github.com/choreo-saga/choreo/app"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/internal/svctest"
)

// healHandlers returns handlers with a tiny orphan delay and a readable meter.
func healHandlers(t *testing.T) (*Handlers, *svctest.Meter) {
	t.Helper()
	m := svctest.NewMeter()
	h, err := NewHandlers(nil, newOutbox(t), Config{ReservationTTL: time.Hour, OrphanAfter: time.Millisecond},
		slog.New(slog.DiscardHandler), m.Provider)
	if err != nil {
		t.Fatal(err)
	}
	return h, m
}

// A payment.authorized for an order the order service never announced changes nothing
// in inventory: no reservation, no stock taken, no event. It is held, reported once as an
// orphan by the reconciliation, and reserved only if the order is announced after all.
func TestUnannouncedPaymentChangesNothing(t *testing.T) {
	pool := newDB(t)
	h, m := healHandlers(t)
	ghost := authorized(t, "o-ghost", item("sku-1", 4))
	apptest.MustHandle(t, pool, app.Decoded(h.PaymentAuthorized), ghost)
	apptest.MustHandle(t, pool, app.Decoded(h.PaymentAuthorized), authorized(t, "o-ghost", item("sku-1", 4))) // redelivered
	a := audit(t, pool)
	if _, ok := a.Orders["o-ghost"]; ok || a.SKUs["sku-1"].Available != 10 || len(outboxEvents(t, pool)) != 0 {
		t.Fatalf("an unannounced order changed inventory: %+v, %d events", a, len(outboxEvents(t, pool)))
	}

	time.Sleep(5 * time.Millisecond) // past OrphanAfter
	// The orphan is reported, once.
	svctest.ReconcileTwice(t, NewReconciler(pool, h).ReconcileOnce, 1)
	if k := m.Sum(t, MetricReconciliations, "kind"); k["orphan_authorization"] != 1 {
		t.Fatalf("corrections %v", k)
	}
	if a := audit(t, pool); a.SKUs["sku-1"].Available != 10 || len(outboxEvents(t, pool)) != 0 {
		t.Fatalf("the reconciliation changed inventory for an orphan: %+v", a)
	}

	// Announced after all: the held payment reserves, caused by the held event.
	announce(t, pool, h, "o-ghost", item("sku-1", 4))
	got := outboxEvents(t, pool)
	if len(got) != 1 || got[0].Type != events.StockReserved || got[0].CausationID != ghost.ID || got[0].CorrelationID != ghost.CorrelationID {
		t.Fatalf("after the announcement: %+v", got)
	}
	if a := audit(t, pool); a.Orders["o-ghost"].Status != StatusReserved || a.SKUs["sku-1"].Available != 6 {
		t.Fatalf("audit %+v", a)
	}
	// Only the order service announces orders.
	forged := apptest.NewEvent(t, events.SourcePayment, events.OrderCreated, "o-f", events.OrderCreatedV1{OrderID: "o-f"})
	if err := apptest.Handle(pool, app.Decoded(h.OrderCreated), forged); consumer.Retryable(err) || err == nil {
		t.Fatalf("forged order.created: %v; want a permanent error", err)
	}
}

// The reconciliation releases a reservation held by an order that ended CANCELLED or
// REJECTED, once, through stock.released; a confirmed order keeps its stock, and a payment
// of an order that already ended reserves nothing.
func TestReconciliationReleasesUnneededReservations(t *testing.T) {
	ctx := context.Background()
	pool := newDB(t)
	h, m := healHandlers(t)
	for _, o := range []string{"o-cancelled", "o-rejected", "o-confirmed", "o-late"} {
		announce(t, pool, h, o, item("sku-1", 2))
	}
	for _, o := range []string{"o-cancelled", "o-rejected", "o-confirmed"} {
		apptest.MustHandle(t, pool, app.Decoded(h.PaymentAuthorized), authorized(t, o, item("sku-1", 2)))
	}
	apptest.MustHandle(t, pool, app.Decoded(h.OrderConfirmed), confirmed(t, "o-confirmed"))
	cancelled := svctest.Outcome(t, events.OrderCancelled, "o-cancelled")
	apptest.MustHandle(t, pool, app.Decoded(h.OrderOutcome), cancelled)
	apptest.MustHandle(t, pool, app.Decoded(h.OrderOutcome), svctest.Outcome(t, events.OrderRejected, "o-rejected"))
	apptest.MustHandle(t, pool, app.Decoded(h.OrderOutcome), svctest.Outcome(t, events.OrderCancelled, "o-late"))
	if _, err := pool.Exec(ctx, `DELETE FROM choreo_outbox`); err != nil {
		t.Fatal(err)
	}
	if a := audit(t, pool); a.SKUs["sku-1"].Available != 4 {
		t.Fatalf("before: %+v", a.SKUs["sku-1"])
	}

	svctest.ReconcileTwice(t, NewReconciler(pool, h).ReconcileOnce, 2)
	got := map[string]string{}
	for _, ev := range outboxEvents(t, pool) {
		p := apptest.DecodeData[events.StockV1](t, ev)
		got[ev.Subject] = ev.Type + " " + p.Reason
		if !slices.Equal(p.Items, []events.Item{item("sku-1", 2)}) || ev.CorrelationID != ev.Subject {
			t.Errorf("correction %+v %+v", ev, p)
		}
		if ev.Subject == "o-cancelled" && ev.CausationID != cancelled.ID {
			t.Errorf("release caused by %q, want the order.cancelled %q", ev.CausationID, cancelled.ID)
		}
	}
	if len(got) != 2 || got["o-cancelled"] != events.StockReleased+" reconciled: order CANCELLED" ||
		got["o-rejected"] != events.StockReleased+" reconciled: order REJECTED" {
		t.Fatalf("corrections %v", got)
	}
	a := audit(t, pool)
	if a.Orders["o-cancelled"].Status != StatusReleased || a.Orders["o-rejected"].Status != StatusReleased ||
		a.Orders["o-confirmed"].Status != StatusCommitted || a.SKUs["sku-1"].Available != 8 {
		t.Fatalf("after: %+v", a)
	}
	if k := m.Sum(t, MetricReconciliations, "kind"); k["release_cancelled"] != 1 || k["release_rejected"] != 1 || len(k) != 2 {
		t.Fatalf("corrections %v", k)
	}

	// A payment that arrives after its order ended CANCELLED reserves nothing.
	apptest.MustHandle(t, pool, app.Decoded(h.PaymentAuthorized), authorized(t, "o-late", item("sku-1", 2)))
	evs := outboxEvents(t, pool)
	last := evs[len(evs)-1]
	if p := apptest.DecodeData[events.StockV1](t, last); last.Type != events.StockUnavailable || p.Reason != ReasonOrderEnded+" CANCELLED" {
		t.Fatalf("late payment answered %s %q", last.Type, p.Reason)
	}
	if a := audit(t, pool); a.SKUs["sku-1"].Available != 8 {
		t.Fatalf("late payment took stock: %+v", a.SKUs["sku-1"])
	}
}

// A re-sent cancellation releases nothing more (compensation is keyed on the order) and
// repeats the stock.released the order service may have missed.
func TestResentCancelIsAnsweredAgainWithoutMovingStock(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t)
	announce(t, pool, h, "o-1", item("sku-1", 3))
	apptest.MustHandle(t, pool, app.Decoded(h.PaymentAuthorized), authorized(t, "o-1", item("sku-1", 3)))
	for attempt := 1; attempt <= 3; attempt++ {
		apptest.MustHandle(t, pool, app.Decoded(h.CancelRequested), svctest.CancelRequested(t, "o-1", attempt))
	}
	var got []string
	for _, ev := range outboxEvents(t, pool) {
		p := apptest.DecodeData[events.StockV1](t, ev)
		got = append(got, ev.Type+" "+p.Reason)
		if ev.Type == events.StockReleased && !slices.Equal(p.Items, []events.Item{item("sku-1", 3)}) {
			t.Errorf("released items %v", p.Items)
		}
	}
	want := []string{events.StockReserved + " ", events.StockReleased + " " + ReasonCancelled,
		events.StockReleased + " " + ReasonCancelled, events.StockReleased + " " + ReasonCancelled}
	if !slices.Equal(got, want) {
		t.Fatalf("emitted %q, want %q", got, want)
	}
	if a := audit(t, pool); a.SKUs["sku-1"].Available != 10 || a.Orders["o-1"].Status != StatusReleased {
		t.Fatalf("audit %+v", a)
	}
}
