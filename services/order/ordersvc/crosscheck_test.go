package ordersvc_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/internal/svctest"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

// consume hands ev to the order service's handler as the consumer does: in
// consumer.Idempotent's transaction, which commits a refusal's writes.
func (f *fixture) consume(t *testing.T, ev event.Event) error {
	t.Helper()
	h, err := consumer.Idempotent(consumer.IdempotentConfig{DB: f.pool, Name: "order"}, f.svc.HandleEvent)
	if err != nil {
		t.Fatal(err)
	}
	return h(context.Background(), &consumer.Message{Group: "order", Event: ev, Decoded: true})
}

func paymentAuthorized(t *testing.T, order, customer string, amount int64, items ...events.Item) event.Event {
	return apptest.NewEvent(t, events.SourcePayment, events.PaymentAuthorized, order,
		events.PaymentV1{OrderID: order, CustomerID: customer, Amount: amount, Items: items})
}

func stockReserved(t *testing.T, order string, items ...events.Item) event.Event {
	return apptest.NewEvent(t, events.SourceInventory, events.StockReserved, order, events.StockV1{OrderID: order, Items: items})
}

// wantMismatch fails t unless err is a refusal dead-lettered as a mismatch.
func wantMismatch(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ordersvc.ErrMismatch) || consumer.Retryable(err) || consumer.Reason(err) != events.ReasonMismatch {
		t.Fatalf("%s: err %v (reason %q); want ErrMismatch, dead-lettered as %s", what, err, consumer.Reason(err), events.ReasonMismatch)
	}
}

// A forged payment.authorized (amount 1, sku-9 ×1000) and a forged stock.reserved for a
// PENDING order are never applied: the first cancels the order (order.cancel_requested,
// so payment refunds and inventory releases), the second is recorded as ignored; both
// are dead-lettered as mismatches and counted.
func TestForgedEventsCancelTheOrder(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	o := f.create(t) // c-1, sku-1 ×2, 4200 cents
	forged := paymentAuthorized(t, o.ID, "c-1", 1, events.Item{SKU: "sku-9", Qty: 1_000})
	wantMismatch(t, "forged payment", f.consume(t, forged))
	wantMismatch(t, "forged reservation", f.consume(t, stockReserved(t, o.ID, events.Item{SKU: "sku-9", Qty: 1_000})))

	got := f.get(t, o.ID)
	if got.State != ordersvc.Cancelling || got.PaymentStatus != "none" || got.StockStatus != "none" ||
		!strings.Contains(got.Reason, "does not match the order") {
		t.Fatalf("order %s (payment %s, stock %s, reason %q); want CANCELLING with no facts", got.State, got.PaymentStatus, got.StockStatus, got.Reason)
	}
	var hist []string
	for _, h := range got.History {
		hist = append(hist, string(h.From)+">"+string(h.To)+" "+h.CauseEventType)
	}
	if want := ">PENDING command.create; PENDING>CANCELLING event.mismatch; CANCELLING>CANCELLING event.mismatch"; strings.Join(hist, "; ") != want {
		t.Fatalf("history %q, want %q", strings.Join(hist, "; "), want)
	}
	if got.History[1].CauseEventID != forged.ID || !got.History[2].Ignored {
		t.Fatalf("history %+v", got.History)
	}
	if types := f.typesFor(t, o.ID); strings.Join(types, ",") != "order.created,order.cancel_requested" {
		t.Fatalf("emitted %v", types)
	}
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if n := counterSum(rm, ordersvc.MetricMismatched); n != 2 {
		t.Fatalf("%s = %d, want 2", ordersvc.MetricMismatched, n)
	}
}

// Each claim is checked: a payment's amount, customer and items, a reservation's items;
// lines of one SKU split differently still match (the fast path's statement does not
// match them, the locked path does).
func TestEventsMustMatchTheOrder(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	item := events.Item{SKU: "sku-1", Qty: 2}
	for name, ev := range map[string]func(id string) event.Event{
		"amount":   func(id string) event.Event { return paymentAuthorized(t, id, "c-1", 4201, item) },
		"customer": func(id string) event.Event { return paymentAuthorized(t, id, "c-2", 4200, item) },
		"items": func(id string) event.Event {
			return paymentAuthorized(t, id, "c-1", 4200, events.Item{SKU: "sku-1", Qty: 3})
		},
		"no items": func(id string) event.Event { return paymentAuthorized(t, id, "c-1", 4200) },
		"extra item": func(id string) event.Event {
			return paymentAuthorized(t, id, "c-1", 4200, item, events.Item{SKU: "sku-2", Qty: 1})
		},
		"stock items": func(id string) event.Event { return stockReserved(t, id, events.Item{SKU: "sku-1", Qty: 1}) },
	} {
		o := f.create(t)
		wantMismatch(t, name, f.consume(t, ev(o.ID)))
		if got := f.get(t, o.ID); got.State != ordersvc.Cancelling {
			t.Fatalf("%s: order %s, want CANCELLING", name, got.State)
		}
	}
	o := f.create(t)
	half := events.Item{SKU: "sku-1", Qty: 1}
	if err := f.consume(t, paymentAuthorized(t, o.ID, "c-1", 4200, half, half)); err != nil {
		t.Fatal(err)
	}
	if err := f.consume(t, stockReserved(t, o.ID, item)); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, o.ID); got.State != ordersvc.Confirmed {
		t.Fatalf("matching events: order %s, want CONFIRMED", got.State)
	}
}

// A transition whose COMMIT loses its connection is retried and logged and counted
// once: no "transition" line and no count for the transaction that never committed.
func TestTransitionLoggedOnceWhenCommitIsKilled(t *testing.T) {
	brokers := testenv.Kafka(t)
	_, ns := testenv.Redis(t)
	dsn := testenv.PostgresDSN(t)
	env := app.MapEnv(map[string]string{
		"DATABASE_URL": dsn, "REDIS_ADDR": testenv.RedisAddr(t),
		"KAFKA_BROKERS": strings.Join(brokers, ","), "KAFKA_PARTITIONS": "2",
	})
	cfg := ordersvc.LoadConfig(env)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	cfg.App.LogLevel = slog.LevelInfo
	logs := &apptest.LogBuffer{}
	base := runServiceLogging(t, cfg, ns, logs)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	commits := svctest.KillFirstCommit(t, pool, "order_history", "NEW.cause_event_type = 'stock.reserved'")

	resp, err := http.Post(base+"/orders", "application/json", strings.NewReader(validBody))
	if err != nil {
		t.Fatal(err)
	}
	var o ordersvc.OrderJSON
	err = json.NewDecoder(resp.Body).Decode(&o)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %v", resp.StatusCode, err)
	}
	k := apptest.NewKafka(t, brokers)
	item := events.Item{SKU: "sku-1", Qty: 2}
	k.Produce(events.TopicPayments, paymentAuthorized(t, o.ID, "c-1", 4200, item))
	k.Produce(events.TopicInventory, stockReserved(t, o.ID, item))
	apptest.WaitFor(t, "the order to be confirmed", func() bool {
		var g ordersvc.OrderJSON
		getJSON(t, base+"/orders/"+o.ID, &g)
		return g.State == ordersvc.Confirmed
	})

	if n := commits(); n != 2 {
		t.Fatalf("%d commits reached the history trigger, want 2 (the killed one and its retry)", n)
	}
	var g ordersvc.OrderJSON
	getJSON(t, base+"/orders/"+o.ID, &g)
	if len(g.History) != 3 {
		t.Fatalf("history %+v, want 3 entries", g.History)
	}
	if n := svctest.LogCount(logs.Records(), "order: transition", map[string]string{"order.id": o.ID, "to": "CONFIRMED"}); n != 1 {
		t.Errorf("%d \"order: transition\" lines to CONFIRMED, want 1:\n%s", n, logs.String())
	}
	metrics := apptest.Metrics(t, base)
	if v := svctest.PromValue(metrics, "choreo_order_transitions_total", map[string]string{"from": "PENDING", "to": "CONFIRMED"}); v != 1 {
		t.Errorf("choreo_order_transitions_total{PENDING>CONFIRMED} = %v, want 1", v)
	}
}
