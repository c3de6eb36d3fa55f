package inventorysvc

import (
	"context"
	"github.com/choreo-saga/choreo/app"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/services/events"
)

var testStock = []Stock{{"sku-1", 10}, {"sku-2", 5}, {"sku-rare", 0}, {"sku-8", 5}, {"sku-9", 2_000}}

// newDB returns a migrated and seeded inventory database.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := apptest.NewDB(t, "inventory", Schema)
	if err := Seed(context.Background(), pool, testStock); err != nil {
		t.Fatal(err)
	}
	return pool
}

func newHandlers(t *testing.T) *Handlers {
	t.Helper()
	h, err := NewHandlers(nil, newOutbox(t), Config{ReservationTTL: time.Hour}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func authorized(t *testing.T, order string, items ...events.Item) event.Event {
	return paymentV2(t, events.PaymentAuthorizedV2{OrderID: order, CustomerID: "c-1", AmountCents: 1_000, Currency: events.Currency, Items: items})
}

// paymentV2 is the payment.authorized of p at schema version 2, as PaymentAuthorized
// declares it (the kit's consumer upcasts v1 before the handler; tests that call the
// handler directly give it v2).
func paymentV2(t *testing.T, p events.PaymentAuthorizedV2) event.Event {
	ev := apptest.NewEvent(t, events.SourcePayment, events.PaymentAuthorized, p.OrderID, p)
	ev.SchemaVersion = 2
	return ev
}

// created is the order service's announcement of order: items (sku-1 ×1 if none), for
// customer c-1 and 1,000 cents, as authorized pays them.
func created(t *testing.T, order string, items ...events.Item) event.Event {
	if len(items) == 0 {
		items = []events.Item{item("sku-1", 1)}
	}
	return apptest.NewEvent(t, events.SourceOrder, events.OrderCreated, order, events.OrderCreatedV1{
		OrderID: order, CustomerID: "c-1", Amount: 1_000, Items: items})
}

// announce hands h the order.created of order with items (see created), as the order
// service announces it.
func announce(t *testing.T, pool *pgxpool.Pool, h *Handlers, order string, items ...events.Item) {
	t.Helper()
	apptest.MustHandle(t, pool, app.Decoded(h.OrderCreated), created(t, order, items...))
}

func confirmed(t *testing.T, order string) event.Event {
	return apptest.NewEvent(t, events.SourceOrder, events.OrderConfirmed, order, events.OrderOutcomeV1{OrderID: order})
}

func cancelRequested(t *testing.T, order string) event.Event {
	return apptest.NewEvent(t, events.SourceOrder, events.OrderCancelRequested, order, events.OrderCancelRequestedV1{OrderID: order, Reason: "test"})
}

func item(sku string, qty int) events.Item { return events.Item{SKU: sku, Qty: qty} }

// outboxEvents returns the events waiting in the default outbox table, in order, all
// bound for the inventory topic.
func outboxEvents(t *testing.T, pool *pgxpool.Pool) []event.Event {
	t.Helper()
	return apptest.OutboxEvents(t, pool, "", events.TopicInventory)
}

func audit(t *testing.T, pool *pgxpool.Pool) Audit {
	t.Helper()
	a, err := TakeAudit(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Conserved(); err != nil {
		t.Fatal(err)
	}
	return a
}

// newOutbox returns an Outbox for the default table.
func newOutbox(t testing.TB) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New()
	if err != nil {
		t.Fatal(err)
	}
	return ob
}
