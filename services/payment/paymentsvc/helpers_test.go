package paymentsvc

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/services/events"
)

var testCustomers = []Customer{
	{ID: "c-1", Balance: 100_000, Limit: 50_000},
	{ID: "c-2", Balance: 100_000, Limit: 50_000},
	{ID: "c-poor", Balance: 1_000, Limit: 100},
	{ID: "c-hang", Balance: 100_000, Limit: 50_000},
}

// newDB returns a migrated and seeded payment database.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := apptest.NewDB(t, "payment", Schema)
	if err := Seed(context.Background(), pool, testCustomers); err != nil {
		t.Fatal(err)
	}
	return pool
}

func newHandlers(t *testing.T, mod func(*Config)) *Handlers {
	t.Helper()
	cfg := Config{Customers: testCustomers, HangCustomers: []string{"c-hang"}}
	if mod != nil {
		mod(&cfg)
	}
	h, err := NewHandlers(nil, newOutbox(t), cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func orderCreated(t *testing.T, order, customer string, amount int64) event.Event {
	return apptest.NewEvent(t, events.SourceOrder, events.OrderCreated, order, events.OrderCreatedV1{
		OrderID: order, CustomerID: customer, Amount: amount, Items: []events.Item{{SKU: "sku-1", Qty: 2}}})
}

func cancelRequested(t *testing.T, order string) event.Event {
	return apptest.NewEvent(t, events.SourceOrder, events.OrderCancelRequested, order, events.OrderCancelRequestedV1{OrderID: order, Reason: "test"})
}

func stockUnavailable(t *testing.T, order string) event.Event {
	return apptest.NewEvent(t, events.SourceInventory, events.StockUnavailable, order, events.StockV1{
		OrderID: order, Items: []events.Item{{SKU: "sku-1", Qty: 2}}, Reason: "insufficient stock"})
}

// outboxEvents returns the events waiting in the default outbox table, in order, all
// bound for the payments topic.
func outboxEvents(t *testing.T, pool *pgxpool.Pool) []event.Event {
	t.Helper()
	return apptest.OutboxEvents(t, pool, "", events.TopicPayments)
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
	for id, o := range a.Orders {
		if o.Charges > 1 || o.Refunds > 1 || o.Refunded > o.Charged {
			t.Fatalf("order %s: %+v", id, o)
		}
	}
	return a
}

func balance(t *testing.T, pool *pgxpool.Pool, customer string) int64 {
	t.Helper()
	var b int64
	if err := pool.QueryRow(context.Background(), `SELECT balance FROM payment_customers WHERE id = $1`, customer).Scan(&b); err != nil {
		t.Fatal(err)
	}
	return b
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
