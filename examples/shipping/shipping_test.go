package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
)

// A handler's end-to-end test: the service on an in-process broker and the machine's
// Postgres and Redis, one order.confirmed in, one shipment and one shipment.scheduled out.
func TestOrderConfirmedSchedulesShipment(t *testing.T) {
	k := apptest.StartKit(t, apptest.NewInfra(t), build)
	in := apptest.NewEvent(t, "orders", typeOrderConfirmed, "o-1", orderConfirmed{OrderID: "o-1"})
	in.CorrelationID = "checkout-1"
	k.Produce(ordersTopic, in)
	out := k.AwaitEvent(shippingTopic, "o-1")
	k.AwaitRow(1, `SELECT count(*) FROM shipments WHERE order_id = 'o-1'`)
	if s := apptest.DecodeData[shipmentScheduled](t, out); out.Type != typeShipmentScheduled || s.OrderID != "o-1" {
		t.Errorf("published %s %+v; want %s for o-1", out.Type, s, typeShipmentScheduled)
	}
	if out.CausationID != in.ID || out.CorrelationID != in.CorrelationID {
		t.Errorf("published in saga %q caused by %q; want the input's saga %q, caused by %s", out.CorrelationID, out.CausationID, in.CorrelationID, in.ID)
	}
}

// Two instances share the orders topic. Every order.confirmed is delivered twice and the
// other order events once (ignored): each order gets exactly one shipment and one
// shipment.scheduled, which continues the input's trace. After both stop and a new
// instance starts on the same database and cluster, a redelivery of every input
// schedules nothing again and new orders are scheduled.
func TestDuplicatesTracesAndRestart(t *testing.T) {
	infra := apptest.NewInfra(t)
	a := apptest.StartKit(t, infra, build)
	b := apptest.StartKit(t, infra, build)

	const orders = 20
	traces := map[string]string{} // order id → trace id of its order.confirmed
	var recs []*kgo.Record
	for i := range orders {
		id := fmt.Sprintf("o-%03d", i)
		recs = append(recs, record(t, "order.created", id, map[string]string{"order_id": id}))
		confirmed := record(t, typeOrderConfirmed, id, orderConfirmed{OrderID: id})
		if i%2 == 0 { // half of the inputs arrive inside a sampled trace
			traces[id] = randomHex(t, 16)
			confirmed.Headers = append(confirmed.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-" + traces[id] + "-" + randomHex(t, 8) + "-01")})
		}
		recs = append(recs, confirmed, clone(confirmed)) // delivered twice
	}
	a.ProduceRecords(recs...)
	a.Settled()
	b.Settled()
	checkOnePerOrder(t, a, orders)
	traced := 0
	for _, r := range a.ReadAll(shippingTopic) {
		id := string(r.Key)
		tid, ok := traces[id]
		if !ok {
			continue
		}
		if tp := header(r, "traceparent"); !strings.HasPrefix(tp, "00-"+tid+"-") || !strings.HasSuffix(tp, "-01") {
			t.Errorf("order %s: output traceparent %q, want trace id %s of the input, sampled", id, tp, tid)
		}
		traced++
	}
	if traced < len(traces) {
		t.Errorf("%d traced outputs checked, want at least %d", traced, len(traces))
	}

	a.Stop()
	b.Stop()
	c := apptest.StartKit(t, infra, build)
	more := []*kgo.Record{record(t, typeOrderConfirmed, "o-new", orderConfirmed{OrderID: "o-new"})}
	for _, r := range recs {
		more = append(more, clone(r)) // every input once more, same event ids
	}
	c.ProduceRecords(more...)
	c.Settled()
	c.Stop() // the relay publishes anything left before we look
	if n := c.Count(`SELECT count(*) FROM choreo_outbox`); n != 0 {
		t.Errorf("%d rows left in the outbox", n)
	}
	checkOnePerOrder(t, c, orders+1)
}

// Poison records go to orders.events.dlq at once with their reason, and the records
// behind them on the same partition are handled. Re-producing a dead-lettered record
// after fixing it schedules its shipment once, however often it is replayed.
func TestPoisonDeadLettered(t *testing.T) {
	k := apptest.StartKit(t, apptest.NewInfra(t), build, app.WithDeadLetterUnknownTypes())

	malformed := record(t, typeOrderConfirmed, "o-bad", map[string]int{"order_id": 42})
	unknown := record(t, "order.exploded", "o-odd", map[string]string{"order_id": "o-odd"})
	mismatch := record(t, typeOrderConfirmed, "o-mix", orderConfirmed{OrderID: "o-other"})
	garbage := &kgo.Record{Topic: ordersTopic, Key: []byte("o-junk"), Value: []byte("not a CloudEvent")}
	k.ProduceRecords(malformed, unknown, mismatch, garbage)
	// Behind each poison record, on the same partition (same key), a good one.
	k.ProduceRecords(
		record(t, typeOrderConfirmed, "o-odd", orderConfirmed{OrderID: "o-odd"}),
		record(t, typeOrderConfirmed, "o-mix", orderConfirmed{OrderID: "o-mix"}),
		record(t, typeOrderConfirmed, "o-junk", orderConfirmed{OrderID: "o-junk"}))
	k.Settled()
	if n := k.Count(`SELECT count(*) FROM shipments WHERE order_id IN ('o-odd', 'o-mix', 'o-junk')`); n != 3 {
		t.Errorf("%d shipments behind the poison records, want 3", n)
	}

	dead := k.ReadAll(ordersTopic + ".dlq")
	if len(dead) != 4 {
		t.Fatalf("%d dead letters, want 4", len(dead))
	}
	want := map[string]string{ // record key → reason
		"o-bad":  consumer.ReasonMalformed,
		"o-odd":  consumer.ReasonUnknownType,
		"o-mix":  consumer.ReasonMalformed,
		"o-junk": consumer.ReasonMalformed,
	}
	var bad *kgo.Record
	for _, r := range dead {
		key := string(r.Key)
		if got := header(r, consumer.HeaderDLQReason); got != want[key] {
			t.Errorf("dead letter %s: reason %q, want %q (error: %s)", key, got, want[key], header(r, consumer.HeaderDLQError))
		}
		if got := header(r, consumer.HeaderDLQTopic); got != ordersTopic {
			t.Errorf("dead letter %s: source topic %q", key, got)
		}
		if key == "o-bad" {
			bad = r
		}
	}
	if n := k.Count(`SELECT count(*) FROM shipments WHERE order_id = 'o-bad'`); n != 0 || bad == nil {
		t.Fatalf("malformed record: %d shipments, dead letter found %v", n, bad != nil)
	}

	// Fix the payload and produce the record back to its source topic, without the
	// choreo_dlq_* headers, twice: one shipment.
	fixed := &kgo.Record{Topic: ordersTopic, Key: bad.Key, Value: []byte(`{"order_id":"o-bad"}`)}
	for _, h := range bad.Headers {
		if !strings.HasPrefix(h.Key, "choreo_dlq_") {
			fixed.Headers = append(fixed.Headers, h)
		}
	}
	k.ProduceRecords(fixed, clone(fixed))
	k.Settled()
	k.Stop()
	checkOnePerOrder(t, k, 4)
}

// checkOnePerOrder asserts exactly one shipment row and one shipment.scheduled event id
// per order, and that they agree.
func checkOnePerOrder(t *testing.T, k view, orders int) {
	t.Helper()
	if n := k.Count(`SELECT count(*) FROM shipments`); n != orders {
		t.Errorf("%d shipments, want %d", n, orders)
	}
	out := k.Events(shippingTopic)
	if len(out) != orders {
		t.Errorf("shipment.scheduled for %d orders, want %d", len(out), orders)
	}
	for id, evs := range out {
		ids := map[string]bool{}
		for _, ev := range evs {
			ids[ev.ID] = true
		}
		if len(ids) != 1 {
			t.Errorf("order %s: %d distinct shipment.scheduled events, want 1", id, len(ids))
			continue
		}
		s := apptest.DecodeData[shipmentScheduled](t, evs[0])
		if n := k.Count(`SELECT count(*) FROM shipments WHERE order_id = $1 AND shipment_id = $2`, id, s.ShipmentID); n != 1 {
			t.Errorf("order %s: event names shipment %s, not in the table", id, s.ShipmentID)
		}
	}
}

// view is what checkOnePerOrder reads: the service's database and cluster.
type view interface {
	Count(query string, args ...any) int
	Events(topic string) map[string][]event.Event
}

// record encodes an event of typ about orderID for the orders topic.
func record(t *testing.T, typ, orderID string, data any) *kgo.Record {
	t.Helper()
	r, err := event.ToRecord(ordersTopic, apptest.NewEvent(t, "orders", typ, orderID, data))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// clone copies r for producing it again (same headers, same event id).
func clone(r *kgo.Record) *kgo.Record {
	return &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: append([]kgo.RecordHeader(nil), r.Headers...)}
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
