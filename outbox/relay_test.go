package outbox_test

import (
	"context"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/tracing"
)

// TestRelayPublishes checks the record, the produce span and the metrics of a
// plain run.
func TestRelayPublishes(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 4)
	pool := db(t)
	ctx := context.Background()
	ob := newOutbox(t)

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	httpCtx, httpSpan := tp.Tracer("test").Start(ctx, "POST /orders")
	want := map[string]int{"order-1": 5, "order-2": 5}
	for _, k := range []string{"order-1", "order-2"} {
		evs := make([]event.Event, want[k])
		for i := range evs {
			evs[i] = newEvent(t, k, i+1)
		}
		if err := ob.InTx(httpCtx, pool, func(ctx context.Context, tx pgx.Tx) error {
			return ob.Enqueue(ctx, tx, topic, evs...)
		}); err != nil {
			t.Fatal(err)
		}
	}
	httpSpan.End()

	start(t, pool, producer(t, brokers), ob, outbox.WithTracerProvider(tp),
		outbox.WithMeterProvider(mp), outbox.WithEntityAttribute("order.id"))
	testenv.Eventually(t, deadline, "the outbox to drain", func() bool { return count(t, pool, "choreo_outbox") == 0 })

	got := readAll(t, brokers, topic)
	if dups := checkDelivery(t, got, want); dups != 0 {
		t.Errorf("%d duplicates without any fault", dups)
	}

	sends := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans.Ended() {
		if s.SpanKind() == trace.SpanKindProducer {
			sends[s.SpanContext().SpanID()] = s
		}
	}
	if len(sends) != 10 {
		t.Fatalf("%d producer spans, want 10", len(sends))
	}
	for _, c := range got {
		remote := trace.SpanContextFromContext(tracing.Extract(ctx, c.rec))
		if remote.TraceID() != httpSpan.SpanContext().TraceID() {
			t.Fatalf("consumed record is in trace %s, want the HTTP request's %s", remote.TraceID(), httpSpan.SpanContext().TraceID())
		}
		s, ok := sends[remote.SpanID()]
		if !ok {
			t.Fatalf("consumed traceparent does not name a produce span")
		}
		if s.Parent().SpanID() != httpSpan.SpanContext().SpanID() {
			t.Errorf("produce span's parent is %s, want the enqueuing span", s.Parent().SpanID())
		}
		attrs := map[attribute.Key]string{}
		for _, kv := range s.Attributes() {
			attrs[kv.Key] = kv.Value.Emit()
		}
		for k, v := range map[attribute.Key]string{
			"messaging.system":                   "kafka",
			"messaging.operation.type":           "send",
			"messaging.destination.name":         topic,
			"messaging.message.id":               c.id,
			"messaging.kafka.message.key":        c.key,
			"saga.correlation_id":                c.key,
			"order.id":                           c.key,
			"messaging.destination.partition.id": itoa(c.rec.Partition),
		} {
			if attrs[k] != v {
				t.Errorf("produce span attribute %s = %q, want %q", k, attrs[k], v)
			}
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	m := metricsByName(rm)
	if v := sumInt(m[outbox.MetricPublished]); v != 10 {
		t.Errorf("%s = %d, want 10", outbox.MetricPublished, v)
	}
	if h, ok := m[outbox.MetricLatency].(metricdata.Histogram[float64]); !ok || h.DataPoints[0].Count != 10 {
		t.Errorf("%s: want 10 observations, got %+v", outbox.MetricLatency, m[outbox.MetricLatency])
	}
	if v := gaugeInt(m[outbox.MetricBacklog]); v != 0 {
		t.Errorf("%s = %d, want 0", outbox.MetricBacklog, v)
	}
	if v := gaugeInt(m[outbox.MetricLeader]); v != 1 {
		t.Errorf("%s = %d, want 1", outbox.MetricLeader, v)
	}
}

// TestPerKeyOrderConcurrentWriters: 16 writers with random delays before
// commit, 20,000 rows over 64 keys, relay running all along: every row is
// published, and per key the consumed order is the commit order.
func TestPerKeyOrderConcurrentWriters(t *testing.T) {
	const (
		writers = 16
		rows    = 20000
		keys    = 64
	)
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 8)
	pool := db(t)
	seqr := newSequencer(t, pool)
	ob := newOutbox(t)
	// Count rows published after a higher id: each one is a transaction that
	// committed late, which a "last id" cursor would have skipped.
	var maxID, late atomic.Int64
	seen := outbox.WithAfterAck(func(_ context.Context, batch []outbox.Published) error {
		for _, p := range batch {
			if p.ID < maxID.Load() {
				late.Add(1)
			} else {
				maxID.Store(p.ID)
			}
		}
		return nil
	})
	start(t, pool, producer(t, brokers), ob, outbox.WithBatchSize(500), seen)

	var next atomic.Int64 // rows handed out
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for {
				n := 1 + rng.IntN(4) // 1..4 events per transaction
				if next.Add(int64(n)) > rows {
					next.Add(-int64(n))
					if next.Load() >= rows {
						return
					}
					n = 1
					if next.Add(1) > rows {
						return
					}
				}
				key := keyName(rng.IntN(keys))
				delay := time.Duration(rng.IntN(2000)) * time.Microsecond
				if err := writeSeq(context.Background(), pool, ob, seqr, topic, key, n, func() { time.Sleep(delay) }); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	want := map[string]int{}
	rs, err := pool.Query(context.Background(), "SELECT key, seq FROM entity")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for rs.Next() {
		var k string
		var n int
		if err := rs.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		want[k] = n
		total += n
	}
	if total != rows {
		t.Fatalf("writers committed %d rows, want %d", total, rows)
	}
	testenv.Eventually(t, deadline, "the outbox to drain", func() bool { return count(t, pool, "choreo_outbox") == 0 })
	got := readAll(t, brokers, topic)
	if dups := checkDelivery(t, got, want); dups != 0 {
		t.Errorf("%d duplicates without any fault", dups)
	}
	if len(got) != rows {
		t.Errorf("consumed %d records, want %d", len(got), rows)
	}
	if late.Load() == 0 {
		t.Error("no transaction committed after a higher id was published; the test did not exercise late commits")
	}
	t.Logf("%d rows were published after a higher id (late commits)", late.Load())
}

// TestCrashBetweenAckAndDelete: the relay dies after the broker acknowledged a
// batch and before it deleted the rows. The next relay republishes that batch
// (duplicates, counted) and nothing is lost.
func TestCrashBetweenAckAndDelete(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 4)
	pool := db(t)
	ob := newOutbox(t)
	want := map[string]int{}
	for i := range 300 {
		k := keyName(i % 7)
		want[k]++
		enqueue(t, pool, ob, topic, newEvent(t, k, want[k]))
	}

	var batches atomic.Int32
	var lost []outbox.Published
	h := &hooks{fail: func(batch []outbox.Published) error {
		if batches.Add(1) == 2 { // crash on the second batch
			lost = batch
			return errInjected
		}
		return nil
	}}
	cl := producer(t, brokers)
	r1 := start(t, pool, cl, ob, outbox.WithBatchSize(50), h.afterAck("r1"))
	if err := r1.wait(t); !errors.Is(err, errInjected) || !errors.Is(err, outbox.ErrHook) {
		t.Fatalf("Run after the injected crash: %v", err)
	}
	if len(lost) != 50 {
		t.Fatalf("crashed batch has %d rows, want 50", len(lost))
	}
	if n := count(t, pool, "choreo_outbox"); n != 250 {
		t.Fatalf("%d rows left after the crash, want 250 (the acked-but-not-deleted batch included)", n)
	}

	start(t, pool, cl, ob, outbox.WithBatchSize(50))
	testenv.Eventually(t, deadline, "the outbox to drain", func() bool { return count(t, pool, "choreo_outbox") == 0 })
	got := readAll(t, brokers, topic)
	dups := checkDelivery(t, got, want)
	if dups != len(lost) {
		t.Errorf("%d duplicates, want exactly the crashed batch (%d)", dups, len(lost))
	}
	t.Logf("republished %d rows of the crashed batch; consumers dedupe them by ce_id", dups)
}

// leaderPID returns the backend holding an advisory lock, or 0.
func leaderPID(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	var pid int
	err := pool.QueryRow(context.Background(),
		"SELECT coalesce(max(pid), 0) FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())").Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func terminate(t testing.TB, pool *pgxpool.Pool, pid int) {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d): %v %v", pid, ok, err)
	}
}

// TestFailover: two relays on one table; only the leader publishes. Killing
// the leader's session hands over to the standby, which drains the backlog.
func TestFailover(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 4)
	pool := db(t)
	ob := newOutbox(t)
	h := &hooks{}
	opts := []outbox.RelayOption{outbox.WithBatchSize(20), outbox.WithTakeoverInterval(100 * time.Millisecond)}
	a := start(t, pool, producer(t, brokers), ob, append(opts, h.afterAck("a"))...)
	testenv.Eventually(t, deadline, "a to lead", a.relay.Leader)
	b := start(t, pool, producer(t, brokers), ob, append(opts, h.afterAck("b"))...)

	want := map[string]int{}
	write := func(n int) {
		for range n {
			k := keyName(rand.IntN(5))
			want[k]++
			enqueue(t, pool, ob, topic, newEvent(t, k, want[k]))
		}
	}
	write(100)
	testenv.Eventually(t, deadline, "phase 1 to drain", func() bool { return count(t, pool, "choreo_outbox") == 0 })
	if h.count("a") < 100 || h.count("b") != 0 {
		t.Fatalf("phase 1: a acked %d, b acked %d; want only the leader a to publish", h.count("a"), h.count("b"))
	}
	if b.relay.Leader() {
		t.Fatal("both relays lead")
	}

	pid := leaderPID(t, pool)
	if pid == 0 {
		t.Fatal("no advisory lock held")
	}
	terminate(t, pool, pid)
	write(300) // a backlog while the leadership moves
	testenv.Eventually(t, deadline, "the backlog to drain after failover", func() bool { return count(t, pool, "choreo_outbox") == 0 })
	testenv.Eventually(t, deadline, "a leader", func() bool { return a.relay.Leader() || b.relay.Leader() })
	if a.relay.Leader() && b.relay.Leader() {
		t.Fatal("both relays lead")
	}
	if pid2 := leaderPID(t, pool); pid2 == pid {
		t.Fatalf("the killed session %d still holds the lock", pid)
	}
	got := readAll(t, brokers, topic)
	dups := checkDelivery(t, got, want)
	t.Logf("a acked %d, b acked %d, duplicates %d", h.count("a"), h.count("b"), dups)
	if h.count("b") == 0 && h.count("a") < 400 {
		t.Error("nobody published after the leader's session was killed")
	}
}

// TestBrokerOutage: every produce fails for a while; nothing is deleted or
// lost, and everything drains once the broker is back. Both franz-go's
// internal retries (default client) and the relay's own backoff (a client
// that gives up after one retry) are exercised.
func TestBrokerOutage(t *testing.T) {
	tests := []struct {
		name     string
		opts     []kgo.Opt
		surfaced bool // produce errors reach the relay (and its metrics)
	}{
		{"client retries", nil, false},
		{"relay retries", []kgo.Opt{kgo.RecordRetries(1)}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := testenv.KafkaCluster(t)
			brokers := c.ListenAddrs()
			topic := testenv.Topic(t, brokers, 3)
			pool := db(t)
			ob := newOutbox(t)
			outage := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: -1})

			reader := sdkmetric.NewManualReader()
			start(t, pool, producer(t, brokers, tc.opts...), ob,
				outbox.WithBatchSize(40), outbox.WithRetryBackoff(10*time.Millisecond, 100*time.Millisecond),
				outbox.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
			want := map[string]int{}
			for i := range 200 {
				k := keyName(i % 9)
				want[k]++
				enqueue(t, pool, ob, topic, newEvent(t, k, want[k]))
			}
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			if err := outage.Wait(ctx, 5); err != nil {
				t.Fatal(err)
			}
			if n := count(t, pool, "choreo_outbox"); n != 200 {
				t.Fatalf("%d rows left during the outage, want all 200", n)
			}
			// The backlog is visible to operators while the broker is away.
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(ctx, &rm); err != nil {
				t.Fatal(err)
			}
			m := metricsByName(rm)
			if v := gaugeInt(m[outbox.MetricBacklog]); v != 200 {
				t.Errorf("%s = %d during the outage, want 200", outbox.MetricBacklog, v)
			}
			if g, ok := m[outbox.MetricOldestAge].(metricdata.Gauge[float64]); !ok || g.DataPoints[0].Value <= 0 {
				t.Errorf("%s: want a positive age during the outage, got %+v", outbox.MetricOldestAge, m[outbox.MetricOldestAge])
			}
			if v := sumInt(m[outbox.MetricErrors]); tc.surfaced && v == 0 {
				t.Errorf("%s = 0 during the outage", outbox.MetricErrors)
			}
			outage.Remove()
			testenv.Eventually(t, deadline, "the outbox to drain", func() bool { return count(t, pool, "choreo_outbox") == 0 })
			got := readAll(t, brokers, topic)
			if dups := checkDelivery(t, got, want); dups != 0 {
				t.Errorf("%d duplicates: rejected produces must not be republished twice", dups)
			}
		})
	}
}

// TestListenConnectionKilled: the LISTEN session is terminated. Rows still
// flow through polling, and the relay listens again by itself.
func TestListenConnectionKilled(t *testing.T) {
	listenPID := func(t *testing.T, pool *pgxpool.Pool) int {
		var pid int
		err := pool.QueryRow(context.Background(),
			"SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE application_name LIKE 'choreo-outbox-listen%' AND query LIKE 'LISTEN%' AND datname = current_database()").Scan(&pid)
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	brokers := testenv.Kafka(t)

	t.Run("polling covers", func(t *testing.T) {
		topic := testenv.Topic(t, brokers, 2)
		pool := db(t)
		r := start(t, pool, producer(t, brokers), newOutbox(t), outbox.WithPollInterval(100*time.Millisecond))
		testenv.Eventually(t, deadline, "the relay to listen", func() bool { return listenPID(t, pool) != 0 })
		terminate(t, pool, listenPID(t, pool))
		// Nobody wakes the relay (no in-process link, no NOTIFY): only the poll finds these rows.
		writer := newOutbox(t)
		want := map[string]int{"k": 3}
		for i := range 3 {
			enqueue(t, pool, writer, topic, newEvent(t, "k", i+1))
		}
		testenv.Eventually(t, deadline, "polling to drain", func() bool { return count(t, pool, "choreo_outbox") == 0 })
		checkDelivery(t, readAll(t, brokers, topic), want)
		if !r.relay.Leader() {
			t.Error("the relay lost leadership with its listen connection")
		}
	})

	t.Run("listens again", func(t *testing.T) {
		topic := testenv.Topic(t, brokers, 2)
		pool := db(t)
		// Polling is effectively off: only NOTIFY can wake the relay.
		start(t, pool, producer(t, brokers), newOutbox(t), outbox.WithPollInterval(time.Hour), outbox.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond))
		testenv.Eventually(t, deadline, "the relay to listen", func() bool { return listenPID(t, pool) != 0 })
		old := listenPID(t, pool)
		terminate(t, pool, old)
		testenv.Eventually(t, deadline, "a new LISTEN session", func() bool { p := listenPID(t, pool); return p != 0 && p != old })
		writer := newOutbox(t, outbox.WithNotifier(pool)) // a writer in "another process": NOTIFY after commit
		want := map[string]int{}
		for i := range 3 {
			want["k"]++
			enqueue(t, pool, writer, topic, newEvent(t, "k", i+1))
			testenv.Eventually(t, deadline, "NOTIFY to wake the relay", func() bool { return count(t, pool, "choreo_outbox") == 0 })
		}
		checkDelivery(t, readAll(t, brokers, topic), want)
	})
}

// TestWakeInProcess: with polling off, Outbox.Wake alone wakes a relay that
// leads in the same process.
func TestWakeInProcess(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 2)
	pool := db(t)
	ob := newOutbox(t) // no Notifier: the signal can only travel in memory
	r := start(t, pool, producer(t, brokers), ob, outbox.WithPollInterval(time.Hour))
	testenv.Eventually(t, deadline, "the relay to lead", r.relay.Leader)
	want := map[string]int{}
	for i := range 5 {
		want["k"]++
		enqueue(t, pool, ob, topic, newEvent(t, "k", i+1)) // InTx calls Wake after commit
		testenv.Eventually(t, deadline, "Wake to reach the relay", func() bool { return count(t, pool, "choreo_outbox") == 0 })
	}
	checkDelivery(t, readAll(t, brokers, topic), want)
}

// TestDeadLetter: records the broker rejects permanently go to the dead-letter
// table with the reason; the rows around them are published, in order.
func TestDeadLetter(t *testing.T) {
	// Incompressible, so that the producer's compression cannot shrink it
	// under the limits.
	raw := make([]byte, 8<<10)
	for i := range raw {
		raw[i] = byte(rand.Uint32())
	}
	big := base64.StdEncoding.EncodeToString(raw)
	tests := []struct {
		name    string
		configs map[string]*string // topic configs
		opts    []kgo.Opt
	}{
		// franz-go refuses the record before sending: only that record fails.
		{"rejected by the client", nil, []kgo.Opt{kgo.ProducerBatchMaxBytes(4 << 10)}},
		// The topic's limit is below the client's batch size (franz-go's default,
		// ~1 MB), no linger: the relay learns the limit and caps its rounds, so
		// no batch holds more than the broker accepts and the large records go
		// alone (TestSizeCapKeepsOrder proves it with split batches).
		{"rejected by the broker", map[string]*string{"max.message.bytes": ptr("4096")}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := testenv.KafkaCluster(t)
			brokers := c.ListenAddrs()
			topic := testenv.Topic(t, brokers, 1) // one partition: neighbours share batches
			if tc.configs != nil {
				alterTopic(t, brokers, topic, tc.configs)
			}
			pool := db(t)
			ob := newOutbox(t)
			want := map[string]int{}
			var evs []event.Event
			for i := range 30 {
				k := keyName(i % 3)
				want[k]++
				evs = append(evs, newEvent(t, k, want[k]))
				if i == 10 || i == 20 {
					large, err := event.New("outbox-test", "test.happened", "huge", payload{Key: "huge", Seq: i, Pad: big})
					if err != nil {
						t.Fatal(err)
					}
					evs = append(evs, large)
				}
			}
			enqueue(t, pool, ob, topic, evs...) // one transaction: all in one batch

			reader := sdkmetric.NewManualReader()
			start(t, pool, producer(t, brokers, tc.opts...), ob,
				outbox.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
			testenv.Eventually(t, deadline, "the outbox to drain", func() bool { return count(t, pool, "choreo_outbox") == 0 })

			if dups := checkDelivery(t, readAll(t, brokers, topic), want); dups != 0 {
				t.Errorf("%d duplicates", dups)
			}
			checkDeadLetters(t, pool, 2)
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			if v := sumInt(metricsByName(rm)[outbox.MetricDeadLettered]); v != 2 {
				t.Errorf("%s = %d, want 2", outbox.MetricDeadLettered, v)
			}
			// Only the large records fail, each twice (in its round, then alone):
			// no neighbour is refused with them.
			if failed := sumInt(metricsByName(rm)[outbox.MetricErrors]); failed != 4 {
				t.Errorf("%s = %d, want 4: only the 2 large records may fail", outbox.MetricErrors, failed)
			}
		})
	}
}

// TestShutdown: a cancelled relay finishes the acknowledged batch (deletes
// it: no duplicates later) and publishes, in a final drain, the rows committed
// before the cancellation; when the broker cannot answer it abandons the
// batch, leaving its rows for the next leader.
func TestShutdown(t *testing.T) {
	t.Run("finishes the batch", func(t *testing.T) {
		brokers := testenv.Kafka(t)
		topic := testenv.Topic(t, brokers, 2)
		pool := db(t)
		ob := newOutbox(t)
		want := map[string]int{}
		for i := range 100 {
			k := keyName(i % 4)
			want[k]++
			enqueue(t, pool, ob, topic, newEvent(t, k, want[k]))
		}
		cl := producer(t, brokers)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		h := &hooks{fail: func([]outbox.Published) error {
			cancel() // shut down while the first batch is acked, not yet deleted
			return nil
		}}
		r := startCtx(t, ctx, pool, cl, ob, outbox.WithBatchSize(30), h.afterAck("r"))
		if err := r.wait(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if n := count(t, pool, "choreo_outbox"); n != 0 {
			t.Fatalf("%d rows left, want 0: the acknowledged batch must be deleted on shutdown and the 70 rows committed before it published by the final drain", n)
		}
		start(t, pool, cl, ob)
		testenv.Eventually(t, deadline, "the outbox to drain", func() bool { return count(t, pool, "choreo_outbox") == 0 })
		if dups := checkDelivery(t, readAll(t, brokers, topic), want); dups != 0 {
			t.Errorf("%d duplicates after a graceful shutdown", dups)
		}
	})

	t.Run("abandons the batch", func(t *testing.T) {
		c := testenv.KafkaCluster(t)
		brokers := c.ListenAddrs()
		topic := testenv.Topic(t, brokers, 2)
		pool := db(t)
		ob := newOutbox(t)
		want := map[string]int{}
		for i := range 50 {
			k := keyName(i % 4)
			want[k]++
			enqueue(t, pool, ob, topic, newEvent(t, k, want[k]))
		}
		outage := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: -1})
		r := start(t, pool, producer(t, brokers), ob, outbox.WithShutdownTimeout(0))
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		if err := outage.Wait(ctx, 3); err != nil {
			t.Fatal(err)
		}
		if err := r.stop(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if n := count(t, pool, "choreo_outbox"); n != 50 {
			t.Fatalf("%d rows left, want all 50", n)
		}
		outage.Remove()
		start(t, pool, producer(t, brokers), ob)
		testenv.Eventually(t, deadline, "the outbox to drain", func() bool { return count(t, pool, "choreo_outbox") == 0 })
		dups := checkDelivery(t, readAll(t, brokers, topic), want)
		t.Logf("%d duplicates (at most the abandoned batch)", dups)
	})
}

// TestUnsafeClient: NewRelay refuses producers that may lose or reorder records.
func TestUnsafeClient(t *testing.T) {
	brokers := testenv.Kafka(t)
	pool := db(t)
	for name, opts := range map[string][]kgo.Opt{
		"not idempotent": {kgo.DisableIdempotentWrite()},
		"acks=1":         {kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck())},
		"transactional":  {kgo.TransactionalID("tx")},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := outbox.NewRelay(pool, producer(t, brokers, opts...), newOutbox(t))
			if !errors.Is(err, outbox.ErrUnsafeClient) {
				t.Fatalf("NewRelay: %v, want ErrUnsafeClient", err)
			}
		})
	}
}
