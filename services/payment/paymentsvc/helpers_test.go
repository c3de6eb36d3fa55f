package paymentsvc

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
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
	ctx := context.Background()
	pool := testenv.Postgres(t)
	if err := app.MigrateLibrary(ctx, pool, nil); err != nil {
		t.Fatal(err)
	}
	if err := app.MigrateSQL(ctx, pool, "payment", Schema); err != nil {
		t.Fatal(err)
	}
	if err := Seed(ctx, pool, testCustomers); err != nil {
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
	h, err := NewHandlers(outbox.New(), cfg, slog.New(slog.DiscardHandler), nil)
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

// outboxEvents returns the events waiting in the default outbox table, in order.
func outboxEvents(t *testing.T, pool *pgxpool.Pool) []event.Event {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT topic, key, headers, payload FROM choreo_outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []event.Event
	for rows.Next() {
		var topic, key string
		var headers []byte
		var payload []byte
		if err := rows.Scan(&topic, &key, &headers, &payload); err != nil {
			t.Fatal(err)
		}
		var pairs [][2]string
		if err := json.Unmarshal(headers, &pairs); err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: topic, Key: []byte(key), Value: payload}
		for _, p := range pairs {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: p[0], Value: []byte(p[1])})
		}
		ev, err := event.FromRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		if topic != events.TopicPayments {
			t.Fatalf("event %s enqueued for topic %s, want %s", ev.Type, topic, events.TopicPayments)
		}
		out = append(out, ev)
	}
	return out
}

func payload(t *testing.T, ev event.Event) events.PaymentV1 {
	t.Helper()
	var p events.PaymentV1
	if err := ev.DecodeData(&p); err != nil {
		t.Fatal(err)
	}
	return p
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
