package consumer

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
)

func TestNewValidates(t *testing.T) {
	h := func(context.Context, *Message) error { return nil }
	tests := []struct {
		name    string
		brokers []string
		group   string
		topics  []string
		h       Handler
	}{
		{"no brokers", nil, "g", []string{"t"}, h},
		{"no group", []string{"b:9092"}, "", []string{"t"}, h},
		{"no topics", []string{"b:9092"}, "g", nil, h},
		{"nil handler", []string{"b:9092"}, "g", []string{"t"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.brokers, tt.group, tt.topics, tt.h); !errors.Is(err, ErrInvalidConfig) {
				t.Fatal("New accepted an invalid configuration")
			}
		})
	}
}

// Every record is handled once, the records of a key in order, and after a graceful stop
// the group's committed offsets are the partitions' end offsets.
func TestConsumerHandlesInOrderAndCommits(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 4)
	group := testenv.Name(t, "g")
	const perKey = 25
	ks := keys(20)
	produce(t, newProducer(t, brokers), seqEvents(t, topic, ks, perKey)...)

	var rec recorder
	var concurrent, maxConcurrent atomic.Int32
	c, err := New(brokers, group, []string{topic}, func(_ context.Context, m *Message) error {
		n := concurrent.Add(1)
		defer concurrent.Add(-1)
		for {
			old := maxConcurrent.Load()
			if n <= old || maxConcurrent.CompareAndSwap(old, n) {
				break
			}
		}
		rec.add(decodeSeq(t, m.Record))
		return nil
	}, fastGroup(), WithMaxBuffered(8), WithMaxPollRecords(16))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, c)
	waitFor(t, "all records handled", func() bool { return rec.total() >= len(ks)*perKey })
	waitFor(t, "zero lag", func() bool {
		lag := c.Lag()[topic]
		if len(lag) != 4 {
			return false
		}
		for _, l := range lag {
			if l != 0 {
				return false
			}
		}
		return true
	})
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := rec.total(); got != len(ks)*perKey {
		t.Errorf("handled %d records, want %d", got, len(ks)*perKey)
	}
	want := make([]int, perKey)
	for i := range want {
		want[i] = i + 1
	}
	for _, k := range ks {
		if got := rec.byKey[k]; !slices.Equal(got, want) {
			t.Errorf("key %s handled in order %v, want %v", k, got, want)
		}
	}
	if maxConcurrent.Load() < 2 {
		t.Logf("partitions never overlapped (max concurrency %d); fine on a busy machine", maxConcurrent.Load())
	}
	if got, want := committed(t, brokers, group, topic), endOffsets(t, brokers, topic); !mapsEqual(got, want) {
		t.Errorf("committed %v, want end offsets %v", got, want)
	}
}

// A full partition buffer pauses fetching; draining it resumes; nothing is lost or
// reordered.
func TestConsumerBackpressure(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	const n, maxBuffered, maxPoll = 60, 4, 2
	produce(t, newProducer(t, brokers), seqEvents(t, topic, []string{"k"}, n)...)

	release := make(chan struct{})
	var rec recorder
	reader := sdkmetric.NewManualReader()
	c, err := New(brokers, testenv.Name(t, "g"), []string{topic}, func(ctx context.Context, m *Message) error {
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		rec.add(decodeSeq(t, m.Record))
		return nil
	}, fastGroup(), WithMaxBuffered(maxBuffered), WithMaxPollRecords(maxPoll),
		WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	w := func() *worker {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.workers[topicPartition{topic, 0}]
	}
	waitFor(t, "partition paused", func() bool {
		w := w()
		if w == nil {
			return false
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.paused
	})
	// The buffer stays bounded while the worker is blocked: give the poll loop time to
	// misbehave, then check (an upper bound, not a timing assertion).
	time.Sleep(300 * time.Millisecond)
	if got := w().buffered(); got > maxBuffered+maxPoll {
		t.Errorf("buffered %d records, bound is %d", got, maxBuffered+maxPoll)
	}
	// The lag gauge reports the whole partition: nothing is settled yet.
	waitFor(t, "lag gauge at n", func() bool { return gauge(t, reader, lagMetricName, topic, 0) == n })
	// Paused means the buffer is above the resume mark (half the bound) and at most one
	// poll above the bound.
	if got := gauge(t, reader, bufferedMetricName, topic, 0); got <= maxBuffered/2 || got > maxBuffered+maxPoll {
		t.Errorf("buffered gauge %d, want within (%d, %d]", got, maxBuffered/2, maxBuffered+maxPoll)
	}
	close(release)
	waitFor(t, "all records handled", func() bool { return rec.total() >= n })
	waitFor(t, "lag gauge at 0", func() bool { return gauge(t, reader, lagMetricName, topic, 0) == 0 })
	if got := rec.byKey["k"]; len(got) != n || !slices.IsSorted(got) {
		t.Errorf("handled %v", got)
	}
	w().mu.Lock()
	paused := w().paused
	w().mu.Unlock()
	if paused {
		t.Error("partition still paused after draining")
	}
}

// A handler error leaves the record unsettled: the runtime hands it over again, and the
// records behind it wait.
func TestConsumerRedeliversOnError(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	produce(t, newProducer(t, brokers), seqEvents(t, topic, []string{"k"}, 5)...)

	var rec recorder
	var failures atomic.Int32
	c, err := New(brokers, testenv.Name(t, "g"), []string{topic}, func(_ context.Context, m *Message) error {
		if _, seq := decodeSeq(t, m.Record); seq == 3 && failures.Add(1) <= 2 {
			return errors.New("transient")
		}
		rec.add(decodeSeq(t, m.Record))
		return nil
	}, fastGroup(), WithRetryBackoff(time.Millisecond, 4*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	waitFor(t, "all records handled", func() bool { return rec.total() >= 5 })
	if got := rec.byKey["k"]; !slices.Equal(got, []int{1, 2, 3, 4, 5}) {
		t.Errorf("handled %v", got)
	}
	if got := failures.Load(); got != 3 {
		t.Errorf("record 3 handed over %d times, want 3", got)
	}
}

// Cancelling Run in the middle of a batch loses nothing: every offset committed belongs
// to a handled record, and a second consumer finishes the rest with no duplicate effect.
func TestConsumerShutdownMidBatch(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 2)
	group := testenv.Name(t, "g")
	pool := newDB(t)
	const perKey = 50
	ks := keys(6)
	total := len(ks) * perKey
	produce(t, newProducer(t, brokers), seqEvents(t, topic, ks, perKey)...)

	h := wrap(idempotent(t, IdempotentConfig{DB: pool, Name: "seq"}, applySeq), decodeRecord())
	var slow atomic.Bool
	slow.Store(true)
	handler := func(ctx context.Context, m *Message) error {
		if slow.Load() {
			time.Sleep(2 * time.Millisecond)
		}
		return h(ctx, m)
	}
	c1, err := New(brokers, group, []string{topic}, handler, fastGroup())
	if err != nil {
		t.Fatal(err)
	}
	r1 := start(t, c1)
	waitFor(t, "a third handled", func() bool { return count(t, pool, `SELECT count(*) FROM effects`) >= total/3 })
	if err := r1.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	handled := count(t, pool, `SELECT count(*) FROM effects`)
	var commitSum int64
	for _, off := range committed(t, brokers, group, topic) {
		commitSum += off
	}
	if commitSum > int64(handled) {
		t.Fatalf("committed %d offsets but only %d records were handled: loss", commitSum, handled)
	}
	if handled >= total {
		t.Fatalf("the shutdown did not interrupt the batch (handled %d of %d)", handled, total)
	}

	slow.Store(false)
	c2, err := New(brokers, group, []string{topic}, handler, fastGroup())
	if err != nil {
		t.Fatal(err)
	}
	r2 := start(t, c2)
	waitFor(t, "all handled", func() bool { return count(t, pool, `SELECT count(*) FROM effects`) >= total })
	if err := r2.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM effects`); n != total {
		t.Errorf("%d effects, want %d", n, total)
	}
	if n := count(t, pool, `SELECT count(DISTINCT event_id) FROM effects`); n != total {
		t.Errorf("%d distinct events, want %d", n, total)
	}
	if n := count(t, pool, `SELECT count(*) FROM entities WHERE seq = $1`, perKey); n != len(ks) {
		t.Errorf("%d keys complete, want %d", n, len(ks))
	}
}

func TestRunTwice(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	c, err := New(brokers, testenv.Name(t, "g"), []string{topic}, func(context.Context, *Message) error { return nil }, fastGroup())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("first Run: %v", err)
	}
	if err := c.Run(ctx); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Run: %v, want ErrRunning", err)
	}
}

// gauge returns the value of an int64 gauge for one partition of topic, or -1.
func gauge(t *testing.T, r *sdkmetric.ManualReader, name, topic string, partition int) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
				tp, _ := dp.Attributes.Value("messaging.destination.name")
				p, _ := dp.Attributes.Value("messaging.destination.partition.id")
				if tp.AsString() == topic && p.AsString() == strconv.Itoa(partition) {
					return dp.Value
				}
			}
		}
	}
	return -1
}

func mapsEqual(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

var (
	_ = pgx.ErrNoRows
	_ = event.ErrMalformed
	_ sync.Mutex
)
