package inventorysvc

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/choreo-saga/choreo/app"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/internal/svctest"
)

// A reservation whose COMMIT loses its connection is retried and counted once: the
// operation counter and the "reserved" log line follow the commit that happened.
func TestReserveCountedOnceWhenCommitIsKilled(t *testing.T) {
	h := startService(t, time.Hour)
	commits := svctest.KillFirstCommit(t, h.Pool, "inventory_reservations", "")
	o := "killed-" + testenv.Name(t, "o")
	h.Produce(events.TopicOrders, created(t, o, item("sku-2", 2)))
	h.settled(events.TopicOrders)
	h.Produce(events.TopicPayments, authorized(t, o, item("sku-2", 2)))
	h.settled(events.TopicOrders, events.TopicPayments)

	if n := commits(); n != 2 {
		t.Fatalf("%d commits reached the reservation trigger, want 2 (the killed one and its retry)", n)
	}
	if a := audit(t, h.Pool); a.Orders[o].Status != StatusReserved || a.SKUs["sku-2"].Available != 3 {
		t.Fatalf("audit: %+v, sku-2 %+v", a.Orders[o], a.SKUs["sku-2"])
	}
	metrics := apptest.Metrics(t, h.BaseURL)
	if v := svctest.PromValue(metrics, "inventory_operations_total", map[string]string{"op": "reserve"}); v != 1 {
		t.Errorf("inventory_operations_total{op=reserve} = %v, want 1", v)
	}
	if n := svctest.LogCount(h.logs.Records(), "inventory: reserved", map[string]string{"order.id": o}); n != 1 {
		t.Errorf("%d \"inventory: reserved\" lines for %s, want 1:\n%s", n, o, h.logs.String())
	}
}

// forged is a payment.authorized with the right source and topic for an order announced
// as sku-8 ×1 for 5,000 cents, claiming 1 cent for sku-9 ×1000.
func forged(order string) (announced, forgery events.OrderCreatedV1) {
	return events.OrderCreatedV1{OrderID: order, CustomerID: "c-1", Amount: 5_000, Items: []events.Item{item("sku-8", 1)}},
		events.OrderCreatedV1{OrderID: order, CustomerID: "c-1", Amount: 1, Items: []events.Item{item("sku-9", 1_000)}}
}

// Inventory reserves only what the order service announced: a forged payment.authorized
// (amount 1, sku-9 ×1000 for a 5,000-cent sku-8 ×1 order) is dead-lettered as a
// mismatch and reserves nothing; the genuine payment still reserves.
func TestForgedPaymentReservesNothing(t *testing.T) {
	h := startService(t, time.Hour)
	o := "forged-" + testenv.Name(t, "o")
	ann, forgery := forged(o)
	h.Produce(events.TopicOrders, apptest.NewEvent(t, events.SourceOrder, events.OrderCreated, o, ann))
	h.settled(events.TopicOrders)
	h.Produce(events.TopicPayments, apptest.NewEvent(t, events.SourcePayment, events.PaymentAuthorized, o,
		events.PaymentV1{OrderID: o, CustomerID: forgery.CustomerID, Amount: forgery.Amount, Items: forgery.Items}))
	h.settled(events.TopicOrders, events.TopicPayments)

	dlq := h.ReadAll(consumer.DeadLetterTopic(events.TopicPayments))
	if len(dlq) != 1 || header(dlq[0], consumer.HeaderDLQReason) != events.ReasonMismatch {
		t.Fatalf("dead letters %d (reason %q), want 1 with reason %s", len(dlq), reasonOf(dlq), events.ReasonMismatch)
	}
	a := audit(t, h.Pool)
	if a.Orders[o].Status != "" || a.SKUs["sku-9"].Available != 2_000 || a.SKUs["sku-9"].Reserved != 0 || a.SKUs["sku-8"].Available != 5 {
		t.Fatalf("the forged payment changed inventory: order %+v, sku-9 %+v", a.Orders[o], a.SKUs["sku-9"])
	}
	if got := h.Events(events.TopicInventory)[o]; len(got) != 0 {
		t.Fatalf("emitted %s for the forged payment", describe(got))
	}
	if v := svctest.PromValue(apptest.Metrics(t, h.BaseURL), "inventory_operations_total", map[string]string{"op": "mismatch"}); v != 1 {
		t.Errorf("inventory_operations_total{op=mismatch} = %v, want 1", v)
	}

	// The genuine payment reserves the announced items.
	h.Produce(events.TopicPayments, apptest.NewEvent(t, events.SourcePayment, events.PaymentAuthorized, o,
		events.PaymentV1{OrderID: o, CustomerID: ann.CustomerID, Amount: ann.Amount, Items: ann.Items}))
	h.settled(events.TopicOrders, events.TopicPayments)
	if a := audit(t, h.Pool); a.Orders[o].Status != StatusReserved || a.SKUs["sku-8"].Available != 4 || a.SKUs["sku-9"].Available != 2_000 {
		t.Fatalf("genuine payment: order %+v, sku-8 %+v", a.Orders[o], a.SKUs["sku-8"])
	}
}

// Each field is checked, and a mismatching payment held before its order was announced
// is dropped at the announcement, reserving nothing.
func TestPaymentMismatch(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t)
	announce(t, pool, h, "o-1", item("sku-1", 2))
	for name, p := range map[string]events.PaymentAuthorizedV2{
		"items":    {OrderID: "o-1", CustomerID: "c-1", AmountCents: 1_000, Currency: events.Currency, Items: []events.Item{item("sku-1", 3)}},
		"customer": {OrderID: "o-1", CustomerID: "c-2", AmountCents: 1_000, Currency: events.Currency, Items: []events.Item{item("sku-1", 2)}},
		"amount":   {OrderID: "o-1", CustomerID: "c-1", AmountCents: 999, Currency: events.Currency, Items: []events.Item{item("sku-1", 2)}},
	} {
		err := apptest.Handle(pool, app.Decoded(h.PaymentAuthorized), paymentV2(t, p))
		if !errors.Is(err, ErrMismatch) || consumer.Retryable(err) || consumer.Reason(err) != events.ReasonMismatch {
			t.Errorf("%s: err %v (reason %q), want ErrMismatch, reason %s", name, err, consumer.Reason(err), events.ReasonMismatch)
		}
	}
	// Lines of one SKU split differently still match.
	apptest.MustHandle(t, pool, app.Decoded(h.PaymentAuthorized), authorized(t, "o-1", item("sku-1", 1), item("sku-1", 1)))
	if a := audit(t, pool); a.Orders["o-1"].Status != StatusReserved {
		t.Fatalf("matching payment: %+v", a.Orders["o-1"])
	}

	apptest.MustHandle(t, pool, app.Decoded(h.PaymentAuthorized), authorized(t, "o-2", item("sku-9", 1_000))) // held
	announce(t, pool, h, "o-2", item("sku-8", 1))
	a := audit(t, pool)
	if a.Orders["o-2"].Status != "" || a.SKUs["sku-9"].Available != 2_000 || len(outboxEvents(t, pool)) != 1 {
		t.Fatalf("a held mismatching payment changed inventory: %+v, sku-9 %+v", a.Orders["o-2"], a.SKUs["sku-9"])
	}
}

// A payment held by an instance of the release before payment.authorized v2 (its data at
// v1, amount in "amount") reserves when this release sees the order announced: the held
// data is read at either version.
func TestHeldV1PaymentReservesAfterUpgrade(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t)
	v1, err := json.Marshal(events.PaymentV1{OrderID: "o-1", CustomerID: "c-1", Amount: 1_000, Items: []events.Item{item("sku-1", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `INSERT INTO inventory_orders (order_id, held_event_id, held_correlation_id, held_data, held_at)
		VALUES ('o-1', 'held-v1', 'o-1', $1, now())`, v1); err != nil {
		t.Fatal(err)
	}
	announce(t, pool, h, "o-1", item("sku-1", 1))
	if a := audit(t, pool); a.Orders["o-1"].Status != StatusReserved {
		t.Fatalf("the held v1 payment did not reserve: %+v", a.Orders["o-1"])
	}
}

// header returns the value of rec's header key.
func header(rec *kgo.Record, key string) string {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// reasonOf lists the dead-letter reasons of recs.
func reasonOf(recs []*kgo.Record) string {
	var rs []string
	for _, r := range recs {
		rs = append(rs, header(r, consumer.HeaderDLQReason))
	}
	return strings.Join(rs, ",")
}
