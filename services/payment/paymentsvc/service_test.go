package paymentsvc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/services/events"
)

// harness runs the payment service in process against real Postgres and Redis and an
// in-process kfake cluster.
type harness struct {
	t       *testing.T
	brokers []string
	pool    *pgxpool.Pool
	cl      *kgo.Client
	adm     *kadm.Client
	base    string // http://addr
	cancel  context.CancelFunc
	done    chan error
}

// infra is what a service instance runs against; two instances (or a restart) can share it.
type infra struct {
	dsn, ns string
	brokers []string
}

func newInfra(t *testing.T) infra {
	_, ns := testenv.Redis(t)
	return infra{dsn: testenv.PostgresDSN(t), ns: ns, brokers: testenv.KafkaCluster(t).ListenAddrs()}
}

func startService(t *testing.T) *harness { return startOn(t, newInfra(t)) }

func startOn(t *testing.T, in infra) *harness {
	t.Helper()
	dsn, ns, brokers := in.dsn, in.ns, in.brokers
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		App: app.Config{
			Service: "payment", DatabaseURL: dsn, RedisAddr: testenv.RedisAddr(t), KafkaBrokers: brokers,
			KafkaPartitions: 3, HTTPAddr: ln.Addr().String(), LogLevel: slog.LevelWarn,
			JaegerUIURL: app.DefaultJaegerUIURL, ShutdownTimeout: time.Minute,
		},
		Group:         "payment",
		Customers:     testCustomers,
		HangCustomers: []string{"c-hang"},
		AppOptions: []app.Option{
			app.WithListener(ln), app.WithoutSignals(), app.WithLogOutput(io.Discard),
			// The otel globals stay on: outbox.Enqueue and the relay propagate trace
			// context through the global propagator.
			app.WithLockOptions(lock.Options{Namespace: ns}),
			app.WithRelayOptions(),
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, brokers: brokers, base: "http://" + ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- Run(ctx, cfg) }()
	t.Cleanup(func() { h.stop() })

	h.waitFor("service ready", func() bool {
		resp, err := http.Get(h.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if h.pool, err = pgxpool.New(context.Background(), dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.pool.Close)
	if h.cl, err = kgo.NewClient(kgo.SeedBrokers(brokers...)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.cl.Close)
	h.adm = kadm.NewClient(h.cl)
	return h
}

// stop shuts the service down and returns Run's result (nil after the first call).
func (h *harness) stop() error {
	if h.cancel == nil {
		return nil
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		return err
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("service did not stop")
	}
}

func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// produce sends every event twice (at-least-once delivery at its worst).
func (h *harness) produce(topic string, evs ...event.Event) {
	h.t.Helper()
	for _, ev := range evs {
		rec, err := event.ToRecord(topic, ev)
		if err != nil {
			h.t.Fatal(err)
		}
		dup := *rec
		if err := h.cl.ProduceSync(context.Background(), rec, &dup).FirstErr(); err != nil {
			h.t.Fatal(err)
		}
	}
}

// produceTraced sends ev once with a W3C traceparent of trace traceID.
func (h *harness) produceTraced(topic, traceID string, ev event.Event) {
	h.t.Helper()
	rec, err := event.ToRecord(topic, ev)
	if err != nil {
		h.t.Fatal(err)
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-" + traceID + "-b7ad6b7169203331-01")})
	h.produceRaw(rec)
}

func (h *harness) produceRaw(recs ...*kgo.Record) {
	h.t.Helper()
	if err := h.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
}

// readAll returns every record of topic up to its current end offsets.
func (h *harness) readAll(topic string) []*kgo.Record {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends, err := h.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		h.t.Fatal(err)
	}
	want := map[int32]int64{}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset; total += o.Offset })
	if total == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for int64(len(out)) < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			h.t.Fatalf("read %s: got %d of %d records", topic, len(out), total)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < want[r.Partition] {
				out = append(out, r)
			}
		})
	}
	return out
}

// events decodes the records of topic by order id.
func (h *harness) events(topic string) map[string][]event.Event {
	h.t.Helper()
	out := map[string][]event.Event{}
	for _, r := range h.readAll(topic) {
		ev, err := event.FromRecord(r)
		if err != nil {
			h.t.Fatalf("record on %s does not decode: %v", topic, err)
		}
		out[ev.Subject] = append(out[ev.Subject], ev)
	}
	return out
}

// settled waits until the group has committed everything on its topics and the outbox
// is empty: after that no more output can appear.
func (h *harness) settled(group string, topics ...string) {
	h.t.Helper()
	h.waitFor("consumer group "+group+" caught up and outbox drained", func() bool {
		ctx := context.Background()
		ends, err := h.adm.ListEndOffsets(ctx, topics...)
		if err != nil {
			return false
		}
		committed, err := h.adm.FetchOffsets(ctx, group)
		if err != nil {
			return false
		}
		ok := true
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset == 0 {
				return
			}
			c, found := committed.Lookup(o.Topic, o.Partition)
			if !found || c.At < o.Offset {
				ok = false
			}
		})
		var n int
		if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM choreo_outbox`).Scan(&n); err != nil || n != 0 {
			return false
		}
		return ok
	})
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
	h.produce(events.TopicOrders,
		orderCreated(t, decline, "c-poor", 500),
		orderCreated(t, refund, "c-1", 2_000),
		orderCreated(t, cancel, "c-2", 3_000),
		orderCreated(t, hang, "c-hang", 4_000),
		cancelRequested(t, tomb),
		orderCreated(t, tomb, "c-2", 5_000),
		newEvent(t, events.SourceOrder, events.OrderConfirmed, charge, events.OrderOutcomeV1{OrderID: charge}), // ignored
	)
	// A poison record and an unknown event type go to the dead-letter topic.
	h.produceRaw(&kgo.Record{Topic: events.TopicOrders, Key: []byte("poison"), Value: []byte("not an event")})
	h.produce(events.TopicOrders, newEvent(t, events.SourceOrder, "order.teleported", "weird", map[string]string{"x": "y"}))
	h.settled("payment", events.TopicOrders)

	// Phase 2: compensations, after the charges they compensate.
	h.produce(events.TopicInventory, stockUnavailable(t, refund))
	h.produce(events.TopicOrders, cancelRequested(t, cancel), cancelRequested(t, hang), cancelRequested(t, decline))
	h.produce(events.TopicInventory, newEvent(t, events.SourceInventory, events.StockReserved, charge,
		events.StockV1{OrderID: charge, Items: []events.Item{}})) // ignored
	h.settled("payment", events.TopicOrders, events.TopicInventory)

	got := h.events(events.TopicPayments)
	want := map[string]string{
		charge:  "payment.authorized()",
		decline: "payment.declined(over limit)",
		refund:  "payment.authorized(),payment.refunded(stock unavailable: insufficient stock)",
		cancel:  "payment.authorized(),payment.refunded(cancelled)",
		hang:    "payment.declined(cancelled)",
		tomb:    "payment.declined(cancelled)",
	}
	for id, w := range want {
		if g := typesOf(got[id]); g != w {
			t.Errorf("order %s: emitted %s, want %s", id, g, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("events for %d orders, want %d: %v", len(got), len(want), got)
	}
	for _, evs := range got {
		for _, ev := range evs {
			if ev.CausationID == "" || ev.CorrelationID != ev.Subject {
				t.Errorf("%s of %s: causation %q correlation %q", ev.Type, ev.Subject, ev.CausationID, ev.CorrelationID)
			}
		}
	}
	// Trace context crossed the service: every output record carries a traceparent, and
	// the charge order's answer belongs to the trace its order.created came in.
	for _, r := range h.readAll(events.TopicPayments) {
		i := slices.IndexFunc(r.Headers, func(hd kgo.RecordHeader) bool { return hd.Key == "traceparent" })
		if i < 0 {
			t.Errorf("record of %s has no traceparent", r.Key)
			continue
		}
		if string(r.Key) == charge && !strings.Contains(string(r.Headers[i].Value), traceID) {
			t.Errorf("answer to %s left the trace: traceparent %s", charge, r.Headers[i].Value)
		}
	}

	dlq := h.readAll(events.TopicOrders + app.DeadLetterSuffix)
	var keys []string
	for _, r := range dlq {
		keys = append(keys, string(r.Key))
	}
	slices.Sort(keys)
	// The unknown type was produced twice; the poison record once.
	if !slices.Equal(keys, []string{"poison", "weird", "weird"}) {
		t.Errorf("dead-lettered keys %v", keys)
	}

	a := audit(t, h.pool)
	if a.Orders[charge].Charges != 1 || a.Orders[refund].Refunds != 1 || a.Orders[cancel].Refunds != 1 ||
		a.Orders[tomb].Charges != 0 || a.Orders[hang].Charges != 0 {
		t.Errorf("ledger: %+v", a.Orders)
	}
	if a.Captured != 1_000 {
		t.Errorf("captured %d, want 1000 (only the charge order keeps its money)", a.Captured)
	}

	resp, err := http.Get(h.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"payment_operations_total", "choreo_consumer"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}

	if err := h.stop(); err != nil {
		t.Fatalf("graceful shutdown: %v", err)
	}
}

// A restart on the same database and topics reseeds nothing, resumes from the
// committed offsets, and never charges an order again, even when order.created is
// redelivered under a new event id.
func TestRestartKeepsState(t *testing.T) {
	in := newInfra(t)
	h := startOn(t, in)
	o := "restart-" + testenv.Name(t, "o")
	h.produce(events.TopicOrders, orderCreated(t, o, "c-1", 1_000))
	h.settled("payment", events.TopicOrders)
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	before := audit(t, h.pool)
	if before.Orders[o].Status != StatusAuthorized {
		t.Fatalf("order %s: %+v", o, before.Orders[o])
	}

	h2 := startOn(t, in)
	h2.produce(events.TopicOrders, orderCreated(t, o, "c-1", 1_000))
	h2.settled("payment", events.TopicOrders)
	after := audit(t, h2.pool)
	if after.BalanceTotal != before.BalanceTotal || after.InitialTotal != before.InitialTotal || after.Orders[o] != before.Orders[o] {
		t.Fatalf("restart changed the books: %+v -> %+v", before, after)
	}
	if got := h2.events(events.TopicPayments)[o]; typesOf(got) != "payment.authorized()" {
		t.Fatalf("emitted %s", typesOf(got))
	}
	if err := h2.stop(); err != nil {
		t.Fatal(err)
	}
}
