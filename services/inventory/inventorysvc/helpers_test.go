package inventorysvc

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/services/events"
)

var testStock = []Stock{{"sku-1", 10}, {"sku-2", 5}, {"sku-rare", 0}}

func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	if err := app.MigrateLibrary(ctx, pool, nil); err != nil {
		t.Fatal(err)
	}
	if err := app.MigrateSQL(ctx, pool, "inventory", Schema); err != nil {
		t.Fatal(err)
	}
	if err := Seed(ctx, pool, testStock); err != nil {
		t.Fatal(err)
	}
	return pool
}

func newHandlers(t *testing.T) *Handlers {
	t.Helper()
	h, err := NewHandlers(outbox.New(), Config{ReservationTTL: time.Hour}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func authorized(t *testing.T, order string, items ...events.Item) event.Event {
	return apptest.NewEvent(t, events.SourcePayment, events.PaymentAuthorized, order, events.PaymentV1{
		OrderID: order, CustomerID: "c-1", Amount: 1_000, Items: items})
}

func confirmed(t *testing.T, order string) event.Event {
	return apptest.NewEvent(t, events.SourceOrder, events.OrderConfirmed, order, events.OrderOutcomeV1{OrderID: order})
}

func cancelRequested(t *testing.T, order string) event.Event {
	return apptest.NewEvent(t, events.SourceOrder, events.OrderCancelRequested, order, events.OrderCancelRequestedV1{OrderID: order, Reason: "test"})
}

func item(sku string, qty int) events.Item { return events.Item{SKU: sku, Qty: qty} }

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
		var headers, payload []byte
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
		if topic != events.TopicInventory {
			t.Fatalf("event %s enqueued for topic %s", ev.Type, topic)
		}
		out = append(out, ev)
	}
	return out
}

func stockPayload(t *testing.T, ev event.Event) events.StockV1 {
	t.Helper()
	var p events.StockV1
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
	return a
}
