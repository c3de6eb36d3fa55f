package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/inventory/inventorysvc"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

// A payment.authorized with the right source and topic that does not match its order
// (amount 1 and sku-9 ×1000 for a 5,000-cent sku-8 ×1 order) moves nothing: the order
// service and inventory each dead-letter it with reason mismatch, inventory reserves
// nothing, and the order is cancelled and compensated (payment cancels the charge it
// held) to CANCELLED with nothing charged.
func TestForgedPaymentIsRefused(t *testing.T) {
	s := startSystem(t)
	ctx := context.Background()
	if err := inventorysvc.Seed(ctx, s.db["inventory"], []inventorysvc.Stock{{SKU: "sku-8", Qty: 10}, {SKU: "sku-9", Qty: 5_000}}); err != nil {
		t.Fatal(err)
	}
	// c-hang's payment is held and never answered: the forged answer is the only one.
	var o ordersvc.OrderJSON
	if st := s.post(t, "/orders", ordersvc.CreateRequest{CustomerID: "c-hang", Amount: 5_000,
		Items: []events.Item{{SKU: "sku-8", Qty: 1}}}, "", &o); st != http.StatusCreated {
		t.Fatalf("create: status %d", st)
	}
	waitFor(t, "payment to hold the order", func() (bool, string) {
		n := s.count(t, "payment", fmt.Sprintf(`SELECT count(*) FROM payment_orders WHERE order_id = '%s' AND status = 'held'`, o.ID))
		return n == 1, "not held yet"
	})
	// Inventory must know the order before the forged answer reaches it: a payment for an
	// order not announced yet is held, and when the announced order differs it is counted
	// and logged as a mismatch instead of dead-lettered (its record was consumed long
	// before), so the dead-letter assertions below need the announced path.
	waitFor(t, "inventory to record the announced order", func() (bool, string) {
		n := s.count(t, "inventory", fmt.Sprintf(`SELECT count(*) FROM inventory_orders WHERE order_id = '%s' AND announced`, o.ID))
		return n == 1, "order.created not consumed yet"
	})

	forged, err := event.New(events.SourcePayment, events.PaymentAuthorized, o.ID, events.PaymentV1{
		OrderID: o.ID, CustomerID: "c-hang", Amount: 1, Items: []events.Item{{SKU: "sku-9", Qty: 1_000}}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := event.ToRecord(events.TopicPayments, forged)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.kafka.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var got ordersvc.OrderJSON
	waitFor(t, "the order to be cancelled and compensated", func() (bool, string) {
		resp, err := s.http.Get(s.orderURL + "/orders/" + o.ID)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		got = ordersvc.OrderJSON{}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			return false, err.Error()
		}
		return got.State.Terminal(), string(got.State)
	})
	waitFor(t, "quiescence", func() (bool, string) { return s.quiescent(t) })

	if got.State != ordersvc.Cancelled || got.PaymentStatus != "declined" {
		t.Errorf("order %s, payment %s; want CANCELLED, declined", got.State, got.PaymentStatus)
	}
	mismatch := false
	for _, h := range got.History {
		mismatch = mismatch || (h.CauseEventType == string(ordersvc.OnMismatch) && h.CauseEventID == forged.ID && h.To == ordersvc.Cancelling)
		if h.CauseEventType == events.PaymentAuthorized {
			t.Errorf("the forged payment was applied: %+v", h)
		}
	}
	if !mismatch {
		t.Errorf("no %s entry cancelling the order in its history: %+v", ordersvc.OnMismatch, got.History)
	}
	// Inventory reserved nothing for it; payment charged nothing.
	if n := s.count(t, "inventory", fmt.Sprintf(`SELECT count(*) FROM inventory_reservation_items WHERE order_id = '%s'`, o.ID)); n != 0 {
		t.Errorf("inventory holds %d reservation lines for the order", n)
	}
	if n := s.count(t, "inventory", `SELECT available FROM inventory_stock WHERE sku = 'sku-9'`) +
		s.count(t, "inventory", `SELECT coalesce(sum(available), 0) FROM inventory_stock_shards WHERE sku = 'sku-9'`); n != 5_000 {
		t.Errorf("sku-9 available %d, want 5000", n)
	}
	if n := s.count(t, "payment", fmt.Sprintf(`SELECT count(*) FROM payment_ledger WHERE order_id = '%s'`, o.ID)); n != 0 {
		t.Errorf("payment ledger has %d rows for the order", n)
	}
	// Both consumers of payments.events dead-lettered it, as a mismatch.
	reasons := map[string]int{}
	for _, r := range readAll(t, s, consumer.DeadLetterTopic(events.TopicPayments)) {
		for _, h := range r.Headers {
			if h.Key == consumer.HeaderDLQReason {
				reasons[string(h.Value)]++
			}
		}
	}
	if reasons[events.ReasonMismatch] != 2 || len(reasons) != 1 {
		t.Errorf("dead-letter reasons %v, want mismatch from the order service and inventory", reasons)
	}
	if v := s.metric(t, "order", "choreo_order_mismatched_events_total"); v != 1 {
		t.Errorf("choreo_order_mismatched_events_total = %v, want 1", v)
	}
}

// readAll returns every record of topic.
func readAll(t *testing.T, s *system, topic string) []*kgo.Record {
	t.Helper()
	ctx := context.Background()
	ends, err := s.admin.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for int64(len(recs)) < want {
		fs := cl.PollFetches(ctx)
		recs = append(recs, fs.Records()...)
	}
	return recs
}
