package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
)

// deadline bounds how long a test waits for something that must happen; it is
// a hang guard, not a performance assertion.
const deadline = 2 * time.Minute

func TestMain(m *testing.M) {
	// Enqueue and the relay use the global propagator (as services do after
	// tracing.Setup).
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	os.Exit(m.Run())
}

// db returns a pool on a fresh database with the default outbox schema.
func db(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return migrated(t, testenv.Postgres(t))
}

// tracedDB is db with every round trip of the pool recorded in the returned RoundTrips.
func tracedDB(t *testing.T) (*pgxpool.Pool, *testenv.RoundTrips) {
	t.Helper()
	tr := &testenv.RoundTrips{}
	return migrated(t, testenv.PostgresWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tr })), tr
}

func migrated(t *testing.T, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	if err := migrate.Up(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// producer returns a Kafka client for the relay. Its retries are quick so
// fault-injection tests do not wait for franz-go's production pacing
// (metadata refreshes at most every 5s by default).
func producer(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(10 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond })}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// running is a relay started by start.
type running struct {
	relay  *outbox.Relay
	cancel context.CancelFunc
	done   chan error
}

// stop cancels the relay and returns Run's error.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // keep it for a second stop (cleanup)
		return err
	case <-time.After(deadline):
		t.Fatal("relay did not stop")
		return nil
	}
}

// wait returns Run's error without cancelling it.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(deadline):
		t.Fatal("relay did not stop")
		return nil
	}
}

// start runs a relay until the test ends (it is stopped before the database
// is dropped).
func start(t *testing.T, pool *pgxpool.Pool, cl *kgo.Client, ob *outbox.Outbox, opts ...outbox.RelayOption) *running {
	t.Helper()
	return startCtx(t, context.Background(), pool, cl, ob, opts...)
}

// startCtx is start with a parent context the test may cancel.
func startCtx(t *testing.T, parent context.Context, pool *pgxpool.Pool, cl *kgo.Client, ob *outbox.Outbox, opts ...outbox.RelayOption) *running {
	t.Helper()
	relay, err := outbox.NewRelay(pool, cl, ob, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(parent)
	r := &running{relay: relay, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- r.relay.Run(ctx) }()
	t.Cleanup(func() { _ = r.stop(t) })
	return r
}

// payload is the JSON body of the test events.
type payload struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
	Pad string `json:"pad,omitempty"`
}

func newEvent(t testing.TB, key string, seq int) event.Event {
	t.Helper()
	ev, err := event.New("outbox-test", "test.happened", key, payload{Key: key, Seq: seq})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// enqueue commits one transaction holding evs for topic.
func enqueue(t testing.TB, pool *pgxpool.Pool, ob *outbox.Outbox, topic string, evs ...event.Event) {
	t.Helper()
	err := ob.InTx(context.Background(), pool, func(ctx context.Context, tx pgx.Tx) error {
		return ob.Enqueue(ctx, tx, topic, evs...)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// count returns the rows in a table.
func count(t testing.TB, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// consumed is one record read back from the topic.
type consumed struct {
	id  string // ce_id
	key string
	seq int
	rec *kgo.Record
}

// readAll reads topic from the start up to the end offsets it has now.
func readAll(t testing.TB, brokers []string, topic string) []consumed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []consumed
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %v (missing %v)", topic, err, want)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := event.FromRecord(r)
			if err != nil {
				t.Fatalf("consumed record does not decode: %v", err)
			}
			var p payload
			if err := ev.DecodeData(&p); err != nil {
				t.Fatal(err)
			}
			out = append(out, consumed{id: ev.ID, key: ev.Subject, seq: p.Seq, rec: r})
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

// checkDelivery asserts that every event in want was consumed, that per key
// the first deliveries come in seq order, and returns the duplicate count.
func checkDelivery(t testing.TB, got []consumed, want map[string]int) (dups int) {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int{}
	for _, c := range got {
		if seen[c.id] {
			dups++
			continue
		}
		seen[c.id] = true
		if c.seq != last[c.key]+1 {
			t.Fatalf("key %s: got seq %d after %d (per-key order broken)", c.key, c.seq, last[c.key])
		}
		last[c.key] = c.seq
	}
	for k, n := range want {
		if last[k] != n {
			t.Errorf("key %s: delivered up to seq %d, want %d", k, last[k], n)
		}
	}
	for k := range last {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected key %s", k)
		}
	}
	return dups
}

// sequencer hands out per-key sequence numbers in commit order: it bumps a
// counter row inside the writer's transaction, which also serialises the
// writers of one key (the entity row lock the design relies on).
type sequencer struct{ pool *pgxpool.Pool }

func newSequencer(t testing.TB, pool *pgxpool.Pool) sequencer {
	t.Helper()
	if _, err := pool.Exec(context.Background(), "CREATE TABLE entity (key text PRIMARY KEY, seq int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return sequencer{pool}
}

func (s sequencer) next(ctx context.Context, tx pgx.Tx, key string, n int) (int, error) {
	var seq int
	err := tx.QueryRow(ctx, "INSERT INTO entity VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET seq = entity.seq + $2 RETURNING seq", key, n).Scan(&seq)
	return seq - n + 1, err
}

// writeSeq commits n events for key in one transaction, numbered in commit order.
func writeSeq(ctx context.Context, pool *pgxpool.Pool, ob *outbox.Outbox, seqr sequencer, topic, key string, n int, beforeCommit func()) error {
	return ob.InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		first, err := seqr.next(ctx, tx, key, n)
		if err != nil {
			return err
		}
		evs := make([]event.Event, n)
		for i := range evs {
			ev, err := event.New("outbox-test", "test.happened", key, payload{Key: key, Seq: first + i})
			if err != nil {
				return err
			}
			evs[i] = ev
		}
		if err := ob.Enqueue(ctx, tx, topic, evs...); err != nil {
			return err
		}
		if beforeCommit != nil {
			beforeCommit()
		}
		return nil
	})
}

// hooks records what relays acknowledged.
type hooks struct {
	mu    sync.Mutex
	acked map[string]int // relay name -> rows acknowledged
	fail  func(batch []outbox.Published) error
}

func (h *hooks) afterAck(name string) outbox.RelayOption {
	return outbox.WithAfterAck(func(_ context.Context, batch []outbox.Published) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.acked == nil {
			h.acked = map[string]int{}
		}
		if h.fail != nil {
			if err := h.fail(batch); err != nil {
				return err
			}
		}
		h.acked[name] += len(batch)
		return nil
	})
}

func (h *hooks) count(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.acked[name]
}

var errInjected = errors.New("injected crash between ack and delete")

func keyName(i int) string { return fmt.Sprintf("k%02d", i) }

func itoa(p int32) string { return fmt.Sprint(p) }

func ptr[T any](v T) *T { return &v }

// alterTopic sets topic configs.
func alterTopic(t testing.TB, brokers []string, topic string, configs map[string]*string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var alters []kadm.AlterConfig
	for k, v := range configs {
		alters = append(alters, kadm.AlterConfig{Name: k, Value: v})
	}
	resp, err := kadm.NewClient(cl).AlterTopicConfigs(context.Background(), alters, topic)
	if err == nil {
		for _, r := range resp {
			if r.Err != nil {
				err = r.Err
			}
		}
	}
	if err != nil {
		t.Fatalf("alter topic %s: %v", topic, err)
	}
}

func metricsByName(rm metricdata.ResourceMetrics) map[string]metricdata.Aggregation {
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func sumInt(a metricdata.Aggregation) int64 {
	s, _ := a.(metricdata.Sum[int64])
	var n int64
	for _, dp := range s.DataPoints {
		n += dp.Value
	}
	return n
}

func gaugeInt(a metricdata.Aggregation) int64 {
	g, ok := a.(metricdata.Gauge[int64])
	if !ok || len(g.DataPoints) == 0 {
		return -1
	}
	return g.DataPoints[0].Value
}

// newOutbox returns an Outbox for the default table, changed by opts.
func newOutbox(t testing.TB, opts ...outbox.Option) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ob
}
