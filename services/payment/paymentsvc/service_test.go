package paymentsvc

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/events"
)

// harness runs the payment service in process against real Postgres and Redis and an
// in-process kfake cluster, collecting its logs.
type harness struct {
	*apptest.Instance
	t    *testing.T
	logs *apptest.LogBuffer
}

func startService(t *testing.T) *harness { return startOn(t, apptest.NewInfra(t)) }

func startOn(t *testing.T, in apptest.Infra) *harness {
	t.Helper()
	h := &harness{t: t, logs: &apptest.LogBuffer{}}
	h.Instance = apptest.StartApp(t, in, "payment", func(ctx context.Context, ac app.Config, opts []app.Option) error {
		ac.LogLevel = slog.LevelInfo
		return Run(ctx, Config{
			App:           ac,
			Group:         "payment",
			Customers:     testCustomers,
			HangCustomers: []string{"c-hang"},
			// The otel globals stay on: outbox.Enqueue and the relay propagate trace
			// context through the global propagator.
			AppOptions: append(opts, app.WithLogOutput(h.logs)),
		})
	})
	return h
}

// settled waits until the payment group caught up on topics and the outbox is drained.
func (h *harness) settled(topics ...string) {
	h.t.Helper()
	h.WaitSettled(h.Pool, "", map[string][]string{"payment": topics})
}

// produceTraced sends ev once with a W3C traceparent of trace traceID.
func (h *harness) produceTraced(topic, traceID string, ev event.Event) {
	h.t.Helper()
	rec, err := event.ToRecord(topic, ev)
	if err != nil {
		h.t.Fatal(err)
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-" + traceID + "-b7ad6b7169203331-01")})
	h.ProduceRecords(rec)
}

func typesOf(evs []event.Event) string {
	var s []string
	for _, ev := range evs {
		var p events.PaymentV1
		_ = ev.DecodeData(&p)
		s = append(s, ev.Type+"("+p.Reason+")")
	}
	return strings.Join(s, ",")
}

// TestServiceThroughKafka drives the payment service through Kafka with every input
// record delivered twice, and checks what it emits, what it dead-letters, and its books.
func TestServiceThroughKafka(t *testing.T) {
	h := startService(t)
	ord := func(name string) string { return name + "-" + testenv.Name(t, "o") }
	var (
		charge  = ord("charge")
		decline = ord("decline")
		refund  = ord("refund")
		cancel  = ord("cancel")
		hang    = ord("hang")
		tomb    = ord("tomb")
	)

	// The charge order arrives inside a trace; its answer must continue that trace.
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	h.produceTraced(events.TopicOrders, traceID, orderCreated(t, charge, "c-1", 1_000))

	// Phase 1: orders arrive (the tombstone order's cancel comes first on purpose).
	h.ProduceTwice(events.TopicOrders,
		orderCreated(t, decline, "c-poor", 500),
		orderCreated(t, refund, "c-1", 2_000),
		orderCreated(t, cancel, "c-2", 3_000),
		orderCreated(t, hang, "c-hang", 4_000),
		cancelRequested(t, tomb),
		orderCreated(t, tomb, "c-2", 5_000),
		apptest.NewEvent(t, events.SourceOrder, events.OrderConfirmed, charge, events.OrderOutcomeV1{OrderID: charge}), // ignored
	)
	// A poison record and an unknown event type go to the dead-letter topic.
	h.ProduceRecords(&kgo.Record{Topic: events.TopicOrders, Key: []byte("poison"), Value: []byte("not an event")})
	h.ProduceTwice(events.TopicOrders, apptest.NewEvent(t, events.SourceOrder, "order.teleported", "weird", map[string]string{"x": "y"}))
	h.settled(events.TopicOrders)

	// Phase 2: compensations, after the charges they compensate.
	h.ProduceTwice(events.TopicInventory, stockUnavailable(t, refund))
	h.ProduceTwice(events.TopicOrders, cancelRequested(t, cancel), cancelRequested(t, hang), cancelRequested(t, decline))
	h.ProduceTwice(events.TopicInventory, apptest.NewEvent(t, events.SourceInventory, events.StockReserved, charge,
		events.StockV1{OrderID: charge, Items: []events.Item{}})) // ignored
	h.settled(events.TopicOrders, events.TopicInventory)

	got := h.Events(events.TopicPayments)
	apptest.WantEvents(t, got, typesOf, map[string]string{
		charge:  "payment.authorized()",
		decline: "payment.declined(over limit)",
		refund:  "payment.authorized(),payment.refunded(stock unavailable: insufficient stock)",
		cancel:  "payment.authorized(),payment.refunded(cancelled)",
		hang:    "payment.declined(cancelled)",
		tomb:    "payment.declined(cancelled)",
	})
	for _, evs := range got {
		for _, ev := range evs {
			if ev.CausationID == "" || ev.CorrelationID != ev.Subject {
				t.Errorf("%s of %s: causation %q correlation %q", ev.Type, ev.Subject, ev.CausationID, ev.CorrelationID)
			}
		}
	}
	// Trace context crossed the service: every output record carries a traceparent, and
	// the charge order's answer belongs to the trace its order.created came in.
	for _, r := range h.ReadAll(events.TopicPayments) {
		i := slices.IndexFunc(r.Headers, func(hd kgo.RecordHeader) bool { return hd.Key == "traceparent" })
		if i < 0 {
			t.Errorf("record of %s has no traceparent", r.Key)
			continue
		}
		if string(r.Key) == charge && !strings.Contains(string(r.Headers[i].Value), traceID) {
			t.Errorf("answer to %s left the trace: traceparent %s", charge, r.Headers[i].Value)
		}
	}

	dlq := h.ReadAll(consumer.DeadLetterTopic(events.TopicOrders))
	var keys []string
	for _, r := range dlq {
		keys = append(keys, string(r.Key))
	}
	slices.Sort(keys)
	// The unknown type was produced twice; the poison record once.
	if !slices.Equal(keys, []string{"poison", "weird", "weird"}) {
		t.Errorf("dead-lettered keys %v", keys)
	}

	a := audit(t, h.Pool)
	if a.Orders[charge].Charges != 1 || a.Orders[refund].Refunds != 1 || a.Orders[cancel].Refunds != 1 ||
		a.Orders[tomb].Charges != 0 || a.Orders[hang].Charges != 0 {
		t.Errorf("ledger: %+v", a.Orders)
	}
	if a.Captured != 1_000 {
		t.Errorf("captured %d, want 1000 (only the charge order keeps its money)", a.Captured)
	}

	// Business log lines are JSON with the saga's ids: the charge order's line carries its
	// correlation id and the trace it arrived in.
	var found bool
	for _, rec := range h.logs.Records() {
		if rec["msg"] != "payment: authorized" || rec["correlation_id"] != charge {
			continue
		}
		found = rec["trace_id"] == traceID && rec["order.id"] == charge && rec["service"] == "payment"
	}
	if !found {
		t.Errorf("no JSON log line for %s's charge with correlation_id, trace_id and order.id:\n%s", charge, h.logs.String())
	}

	metrics := apptest.Metrics(t, h.BaseURL)
	for _, m := range []string{"payment_operations_total", "choreo_consumer"} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}

	if err := h.Stop(); err != nil {
		t.Fatalf("graceful shutdown: %v", err)
	}
}

// A restart on the same database and topics reseeds nothing, resumes from the
// committed offsets, and never charges an order again, even when order.created is
// redelivered under a new event id.
func TestRestartKeepsState(t *testing.T) {
	in := apptest.NewInfra(t)
	h := startOn(t, in)
	o := "restart-" + testenv.Name(t, "o")
	h.ProduceTwice(events.TopicOrders, orderCreated(t, o, "c-1", 1_000))
	h.settled(events.TopicOrders)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	before := audit(t, h.Pool)
	if before.Orders[o].Status != StatusAuthorized {
		t.Fatalf("order %s: %+v", o, before.Orders[o])
	}

	h2 := startOn(t, in)
	h2.ProduceTwice(events.TopicOrders, orderCreated(t, o, "c-1", 1_000))
	h2.settled(events.TopicOrders)
	after := audit(t, h2.Pool)
	if after.BalanceTotal != before.BalanceTotal || after.InitialTotal != before.InitialTotal || after.Orders[o] != before.Orders[o] {
		t.Fatalf("restart changed the books: %+v -> %+v", before, after)
	}
	if got := h2.Events(events.TopicPayments)[o]; typesOf(got) != "payment.authorized()" {
		t.Fatalf("emitted %s", typesOf(got))
	}
	if err := h2.Stop(); err != nil {
		t.Fatal(err)
	}
}
