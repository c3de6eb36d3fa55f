package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
)

// testTimeout bounds every wait of these tests; it is a liveness guard, not a
// performance assertion.
const testTimeout = 2 * time.Minute

const partitions = 4

// env is one test's infrastructure and the service configuration pointing at it.
type env struct {
	cfg  Config
	pool *pgxpool.Pool // the service's database, for assertions
	adm  *kadm.Client
	prod *kgo.Client // a plain franz-go producer, as another team's service would use
}

func newEnv(t *testing.T) *env {
	t.Helper()
	brokers := testenv.Kafka(t)
	dsn := testenv.PostgresDSN(t)
	_, ns := testenv.Redis(t) // lock keys live under ns and are deleted after the test
	topic := func(prefix string) string { return strings.ReplaceAll(testenv.Name(t, prefix), "_", "-") }
	cfg := Config{
		Brokers:       brokers,
		PostgresDSN:   dsn,
		RedisAddr:     testenv.RedisAddr(t),
		Group:         topic("shipping"),
		OrdersTopic:   topic("orders") + ".events",
		ShippingTopic: topic("shipping") + ".events",
		Partitions:    partitions,
		MaxConns:      partitions + 4,
		LockNamespace: ns,
	}
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return &env{cfg: cfg, pool: pool, adm: kadm.NewClient(prod), prod: prod}
}

// instance is one running service.
type instance struct {
	name   string
	addr   string
	cancel context.CancelFunc
	done   chan error
	logs   *logLines
}

// start runs the service like main does, on a free port, until stop or the test's end.
func (e *env) start(t *testing.T, name string) *instance {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.Listener = ln
	logs := &logLines{t: t, name: name}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{name: name, addr: ln.Addr().String(), cancel: cancel, done: make(chan error, 1), logs: logs}
	go func() { in.done <- run(ctx, cfg) }()
	t.Cleanup(func() { in.stop(t) })
	e.waitFor(t, name+" serving /healthz", func() bool {
		resp, err := http.Get("http://" + in.addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return in
}

// stop cancels the instance, as SIGTERM does, and checks that it shut down cleanly.
func (in *instance) stop(t *testing.T) {
	t.Helper()
	if in.cancel == nil {
		return
	}
	in.cancel()
	in.cancel = nil
	select {
	case err := <-in.done:
		if err != nil {
			t.Errorf("%s: run: %v", in.name, err)
		}
	case <-time.After(testTimeout):
		t.Fatalf("%s did not shut down", in.name)
	}
}

// metric returns the sum of the samples of the Prometheus metric name whose labels
// contain every one of labels (e.g. `choreo_outcome="duplicate"`), and how many there are.
func (in *instance) metric(t *testing.T, name string, labels ...string) (sum float64, n int) {
	t.Helper()
	resp, err := http.Get("http://" + in.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
		n++
	}
	return sum, n
}

func (e *env) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, testTimeout, what, cond)
}

// waitSettled waits until the instances have settled at least n records between them and
// have no lag on any of the topic's partitions.
func (e *env) waitSettled(t *testing.T, n int, ins ...*instance) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		var settled, lag float64
		var owned int
		for _, in := range ins {
			s, _ := in.metric(t, "choreo_consumer_outcomes_total")
			l, o := in.metric(t, "choreo_consumer_lag")
			settled, lag, owned = settled+s, lag+l, owned+o
		}
		if settled >= float64(n) && owned == partitions && lag == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d records settled: %v settled, lag %v on %d partitions", n, settled, lag, owned)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) produce(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := e.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func (e *env) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// readAll reads topic from the start up to its current end.
func (e *env) readAll(t *testing.T, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ends, err := e.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.cfg.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %v (still waiting for partitions %v)", topic, err, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

// record returns an event in CloudEvents binary mode, as another team's producer writes it.
func record(t *testing.T, topic, typ, orderID string, data any, headers ...kgo.RecordHeader) *kgo.Record {
	t.Helper()
	ev, err := event.New("order", typ, orderID, data)
	if err != nil {
		t.Fatal(err)
	}
	r, err := event.ToRecord(topic, ev)
	if err != nil {
		t.Fatal(err)
	}
	r.Headers = append(r.Headers, headers...)
	return r
}

// clone returns a copy of r to produce again (franz-go owns a record once produced).
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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// byOrder groups the shipment.scheduled records of topic by order id (the key), keeping
// each distinct event id once: the relay publishes at least once.
func (e *env) scheduled(t *testing.T) map[string]map[string]*kgo.Record {
	t.Helper()
	out := map[string]map[string]*kgo.Record{}
	for _, r := range e.readAll(t, e.cfg.ShippingTopic) {
		if typ := header(r, event.HeaderType); typ != typeShipmentScheduled {
			t.Fatalf("unexpected type %q on %s", typ, e.cfg.ShippingTopic)
		}
		k := string(r.Key)
		if out[k] == nil {
			out[k] = map[string]*kgo.Record{}
		}
		out[k][header(r, event.HeaderID)] = r
	}
	return out
}

// Two instances consume one topic of several partitions. Every order.confirmed is
// produced twice (the same event) and the other order events once: each order gets
// exactly one shipment and one shipment.scheduled, which continues the input's trace.
// Then both stop, the group is rewound to the start of the topic and an instance replays
// all of it: nothing is scheduled or published twice.
func TestTwoInstancesDuplicatesTracesAndReplay(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, "a")
	b := e.start(t, "b")
	e.waitFor(t, "both instances to own partitions", func() bool {
		_, na := a.metric(t, "choreo_consumer_buffered")
		_, nb := b.metric(t, "choreo_consumer_buffered")
		return na > 0 && nb > 0 && na+nb == partitions
	})

	const orders = 40
	traces := map[string]string{} // order id → trace id of its order.confirmed
	var recs []*kgo.Record
	for i := range orders {
		id := fmt.Sprintf("o-%03d", i)
		recs = append(recs, record(t, e.cfg.OrdersTopic, "order.created", id, map[string]string{"order_id": id}))
		var hs []kgo.RecordHeader
		if i%2 == 0 { // half of the inputs arrive inside a trace
			traces[id] = randomHex(16)
			hs = append(hs, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-" + traces[id] + "-" + randomHex(8) + "-01")})
		}
		confirmed := record(t, e.cfg.OrdersTopic, typeOrderConfirmed, id, orderConfirmed{OrderID: id}, hs...)
		recs = append(recs, confirmed, clone(confirmed)) // delivered twice
	}
	e.produce(t, recs...)

	e.waitFor(t, "a shipment per order", func() bool { return e.count(t, `SELECT count(*) FROM shipments`) == orders })
	e.waitFor(t, "the outbox to drain", func() bool { return e.count(t, `SELECT count(*) FROM choreo_outbox`) == 0 })
	e.waitSettled(t, len(recs), a, b)
	var handled, dups float64
	for _, in := range []*instance{a, b} {
		h, _ := in.metric(t, "choreo_consumer_outcomes_total", `choreo_outcome="handled"`)
		if h == 0 {
			t.Errorf("instance %s handled nothing; want both instances to work", in.name)
		}
		d, _ := in.metric(t, "choreo_consumer_outcomes_total", `choreo_outcome="duplicate"`)
		handled, dups = handled+h, dups+d
	}
	// Every order.confirmed commits once; every other delivery of it is a duplicate
	// (exactly one each unless a rebalance redelivered some).
	if handled != orders || dups < orders {
		t.Errorf("handled %v, duplicates %v; want %d handled and at least %d duplicates", handled, dups, orders, orders)
	}

	out := e.scheduled(t)
	checkOnePerOrder(t, e, out, orders)
	for id, tid := range traces {
		for _, r := range out[id] {
			tp := header(r, "traceparent")
			if parts := strings.Split(tp, "-"); len(parts) != 4 || parts[1] != tid {
				t.Errorf("order %s: output traceparent %q, want trace id %s of the input", id, tp, tid)
			}
		}
	}

	// Replay the whole topic: stop both instances, rewind the group, start one.
	a.stop(t)
	b.stop(t)
	ctx := context.Background()
	starts, err := e.adm.ListStartOffsets(ctx, e.cfg.OrdersTopic)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := e.adm.CommitOffsets(ctx, e.cfg.Group, starts.Offsets()); err != nil || resp.Error() != nil {
		t.Fatalf("rewind group: %v %v", err, resp.Error())
	}
	c := e.start(t, "c")
	e.waitSettled(t, len(recs), c)
	h, _ := c.metric(t, "choreo_consumer_outcomes_total", `choreo_outcome="handled"`)
	d, _ := c.metric(t, "choreo_consumer_outcomes_total", `choreo_outcome="duplicate"`)
	if h != 0 || d != 2*orders {
		t.Errorf("replay: handled %v, duplicates %v; want 0 and %d (every order.confirmed, twice)", h, d, 2*orders)
	}
	c.stop(t) // the relay publishes anything left before we look
	if n := e.count(t, `SELECT count(*) FROM choreo_outbox`); n != 0 {
		t.Errorf("replay left %d rows in the outbox", n)
	}
	checkOnePerOrder(t, e, e.scheduled(t), orders)
}

// checkOnePerOrder asserts exactly one shipment row and one shipment.scheduled event id
// per order, and that they agree.
func checkOnePerOrder(t *testing.T, e *env, out map[string]map[string]*kgo.Record, orders int) {
	t.Helper()
	if n := e.count(t, `SELECT count(*) FROM shipments`); n != orders {
		t.Errorf("%d shipments, want %d", n, orders)
	}
	if len(out) != orders {
		t.Errorf("shipment.scheduled for %d orders, want %d", len(out), orders)
	}
	for id, evs := range out {
		if len(evs) != 1 {
			t.Errorf("order %s: %d distinct shipment.scheduled events, want 1", id, len(evs))
			continue
		}
		for _, r := range evs {
			ev, err := event.FromRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			var s shipmentScheduled
			if err := ev.DecodeData(&s); err != nil {
				t.Fatal(err)
			}
			if n := e.count(t, `SELECT count(*) FROM shipments WHERE order_id = $1 AND shipment_id = $2`, id, s.ShipmentID); n != 1 {
				t.Errorf("order %s: event names shipment %s, not in the table", id, s.ShipmentID)
			}
		}
	}
}

// Poison records go to orders.events.dlq at once with their reason, and the records
// behind them on the same partition are handled. Re-producing a dead-lettered record
// after fixing it schedules its shipment once, however often it is replayed.
func TestPoisonDeadLetteredThenFixedAndReplayed(t *testing.T) {
	e := newEnv(t)
	in := e.start(t, "a")

	malformed := record(t, e.cfg.OrdersTopic, typeOrderConfirmed, "o-bad", map[string]int{"order_id": 42})
	unknown := record(t, e.cfg.OrdersTopic, "order.exploded", "o-odd", map[string]string{"order_id": "o-odd"})
	mismatch := record(t, e.cfg.OrdersTopic, typeOrderConfirmed, "o-mix", orderConfirmed{OrderID: "o-other"})
	e.produce(t, malformed, unknown, mismatch)
	// Behind each poison record, on the same partition (same key), a good one.
	e.produce(t,
		record(t, e.cfg.OrdersTopic, typeOrderConfirmed, "o-odd", orderConfirmed{OrderID: "o-odd"}),
		record(t, e.cfg.OrdersTopic, typeOrderConfirmed, "o-mix", orderConfirmed{OrderID: "o-mix"}))
	e.waitFor(t, "the good records behind the poison", func() bool {
		return e.count(t, `SELECT count(*) FROM shipments WHERE order_id IN ('o-odd', 'o-mix')`) == 2
	})

	e.waitFor(t, "three dead letters", func() bool {
		n, _ := in.metric(t, "choreo_consumer_outcomes_total", `choreo_outcome="dead_lettered"`)
		return n == 3
	})
	dead := e.readAll(t, e.cfg.OrdersTopic+".dlq")
	if len(dead) != 3 {
		t.Fatalf("%d dead letters, want 3", len(dead))
	}
	want := map[string]string{
		header(malformed, event.HeaderID): consumer.ReasonMalformed,
		header(unknown, event.HeaderID):   consumer.ReasonUnknownType,
		header(mismatch, event.HeaderID):  consumer.ReasonPermanent,
	}
	var bad *kgo.Record
	for _, r := range dead {
		id := header(r, event.HeaderID)
		if got := header(r, consumer.HeaderDLQReason); got != want[id] {
			t.Errorf("dead letter %s: reason %q, want %q (error: %s)", id, got, want[id], header(r, consumer.HeaderDLQError))
		}
		if got := header(r, consumer.HeaderDLQTopic); got != e.cfg.OrdersTopic {
			t.Errorf("dead letter %s: source topic %q", id, got)
		}
		if id == header(malformed, event.HeaderID) {
			bad = r
		}
	}
	if n := e.count(t, `SELECT count(*) FROM shipments WHERE order_id = 'o-bad'`); n != 0 {
		t.Fatalf("a malformed record scheduled a shipment")
	}

	// Fix the payload and produce the record back to its source topic, without the
	// choreo_dlq_* headers; then replay it once more.
	fixed := &kgo.Record{Topic: e.cfg.OrdersTopic, Key: bad.Key, Value: []byte(`{"order_id":"o-bad"}`)}
	for _, h := range bad.Headers {
		if !strings.HasPrefix(h.Key, "choreo_dlq_") {
			fixed.Headers = append(fixed.Headers, h)
		}
	}
	e.produce(t, fixed)
	e.waitFor(t, "the fixed record's shipment", func() bool {
		return e.count(t, `SELECT count(*) FROM shipments WHERE order_id = 'o-bad'`) == 1
	})
	e.produce(t, clone(fixed))
	e.waitFor(t, "the replayed fix settled as a duplicate", func() bool {
		d, _ := in.metric(t, "choreo_consumer_outcomes_total", `choreo_outcome="duplicate"`)
		return d == 1
	})
	in.stop(t)
	checkOnePerOrder(t, e, e.scheduled(t), 3)
}

// A pool smaller than the partitions the instance owns is reported at start, once, at
// Warn, with both numbers; the service still works.
func TestPoolSmallerThanPartitionsIsReported(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxConns = 2
	in := e.start(t, "a")
	e.produce(t, record(t, e.cfg.OrdersTopic, typeOrderConfirmed, "o-1", orderConfirmed{OrderID: "o-1"}))
	e.waitFor(t, "the shipment", func() bool { return e.count(t, `SELECT count(*) FROM shipments`) == 1 })
	e.waitFor(t, "the pool warning", func() bool {
		return len(in.logs.find("level=WARN", "Postgres pool smaller than the partitions", "partitions=4", "pool_max_conns=2")) > 0
	})
	e.produce(t, record(t, e.cfg.OrdersTopic, typeOrderConfirmed, "o-2", orderConfirmed{OrderID: "o-2"}))
	e.waitFor(t, "the second shipment", func() bool { return e.count(t, `SELECT count(*) FROM shipments`) == 2 })
	in.stop(t)
	if n := len(in.logs.find("Postgres pool smaller")); n != 1 {
		t.Errorf("%d pool warnings, want 1 for one assignment", n)
	}
}

// A missing or invalid variable is reported by name, all of them at once.
func TestLoadConfig(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	_, err := loadConfig(env(map[string]string{"KAFKA_BROKERS": "kafka", "TOPIC_PARTITIONS": "zero"}))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"POSTGRES_DSN is required", "REDIS_ADDR is required", `KAFKA_BROKERS: "kafka" is not host:port`, `TOPIC_PARTITIONS="zero"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	cfg, err := loadConfig(env(map[string]string{
		"KAFKA_BROKERS": "k1:9092, k2:9092", "POSTGRES_DSN": "postgres://db/shipping", "REDIS_ADDR": "redis:6379",
		"TOPIC_PARTITIONS": "12",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Brokers) != 2 || cfg.Brokers[1] != "k2:9092" || cfg.MaxConns != 16 || cfg.OrdersTopic != "orders.events" || cfg.HTTPAddr != ":8080" {
		t.Errorf("config %+v", cfg)
	}
}

// logLines keeps an instance's log lines and copies them to the test log.
type logLines struct {
	t     *testing.T
	name  string
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	l.t.Logf("%s: %s", l.name, line)
	return len(p), nil
}

// find returns the lines that contain every one of parts.
func (l *logLines) find(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, line := range l.lines {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}
