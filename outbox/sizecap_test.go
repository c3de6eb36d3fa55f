package outbox_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
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
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
)

// TestSizeCapKeepsOrder: a topic whose max.message.bytes (4 KiB) is far below the
// client's ProducerBatchMaxBytes (franz-go's default, ~1 MB), no linger, one partition,
// 300 rows of 3 keys (about ten fit in 4 KiB) with two oversized rows among them, and a
// second topic with the default limit interleaved. Without the relay's cap franz-go splits
// a round's rows over several produce batches, the broker refuses the large ones and
// writes the later ones, and per-key order breaks (it did on every run on the code before
// the cap). With it: every key in id order, the oversized rows dead-lettered with the
// reason, nothing lost or duplicated, the other topic never held back.
func TestSizeCapKeepsOrder(t *testing.T) {
	raw := make([]byte, 8<<10) // incompressible: no codec shrinks it under 4 KiB
	for i := range raw {
		raw[i] = byte(rand.Uint32())
	}
	big := base64.StdEncoding.EncodeToString(raw)
	pad := strings.Repeat("p", 200)
	variants := []struct {
		name string
		opts []kgo.Opt
		// tried: the oversized rows are produced (alone) before they are
		// dead-lettered. A client that compresses may shrink a record under the
		// limit, so the relay lets the broker decide; one that does not cannot,
		// so the relay dead-letters without a produce attempt.
		tried bool
	}{
		{"snappy client", nil, true},
		{"uncompressed client", []kgo.Opt{kgo.ProducerBatchCompression(kgo.NoCompression())}, false},
	}
	for _, v := range variants {
		for run := range 4 {
			paced := run%2 == 0
			t.Run(fmt.Sprintf("%s/paced=%v/run%d", v.name, paced, run), func(t *testing.T) {
				c := testenv.KafkaCluster(t)
				brokers := c.ListenAddrs()
				small := testenv.Topic(t, brokers, 1)
				alterTopic(t, brokers, small, map[string]*string{"max.message.bytes": ptr("4096")})
				other := testenv.Topic(t, brokers, 1)
				pool := db(t)
				ob := newOutbox(t)

				want := map[string]int{}
				wantOther := map[string]int{}
				var evs, others []event.Event
				for n := range 300 {
					k := keyName(n % 3)
					want[k]++
					ev, err := event.New("outbox-test", "test.happened", k, payload{Key: k, Seq: want[k], Pad: pad})
					if err != nil {
						t.Fatal(err)
					}
					evs = append(evs, ev)
					if n == 100 || n == 200 {
						large, err := event.New("outbox-test", "test.happened", "huge", payload{Key: "huge", Seq: n, Pad: big})
						if err != nil {
							t.Fatal(err)
						}
						evs = append(evs, large)
					}
					if n%5 == 0 {
						ok := keyName(3 + n%2)
						wantOther[ok]++
						others = append(others, newEvent(t, ok, wantOther[ok]))
					}
				}

				reader := sdkmetric.NewManualReader()
				opts := []outbox.RelayOption{outbox.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))}
				copts := v.opts
				if paced {
					p := &pacer{t: t, n: 5, topic: small}
					opts = append(opts, outbox.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))))
					copts = append(copts, kgo.WithHooks(p))
				}
				start(t, pool, producer(t, brokers, copts...), ob, opts...)
				// A first row per topic, so that the client knows the partitions and
				// sends the next round's first records at once (as a running relay
				// does) rather than all together once the metadata arrives.
				enqueue(t, pool, ob, small, evs[0])
				enqueue(t, pool, ob, other, others[0])
				testenv.Eventually(t, deadline, "the first rows to be published", func() bool { return count(t, pool, "choreo_outbox") == 0 })
				// The rest in one transaction, so that one round reads them all; the
				// two topics' rows interleave in id order.
				err := ob.InTx(context.Background(), pool, func(ctx context.Context, tx pgx.Tx) error {
					half := len(evs) / 2
					for _, part := range []struct {
						topic string
						evs   []event.Event
					}{{small, evs[1:half]}, {other, others[1:]}, {small, evs[half:]}} {
						if err := ob.Enqueue(ctx, tx, part.topic, part.evs...); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				testenv.Eventually(t, deadline, "the outbox to drain", func() bool { return count(t, pool, "choreo_outbox") == 0 })

				if dups := checkDelivery(t, readAll(t, brokers, small), want); dups != 0 {
					t.Errorf("%d duplicates on the capped topic", dups)
				}
				if dups := checkDelivery(t, readAll(t, brokers, other), wantOther); dups != 0 {
					t.Errorf("%d duplicates on the other topic", dups)
				}
				checkDeadLetters(t, pool, 2)
				var rm metricdata.ResourceMetrics
				if err := reader.Collect(context.Background(), &rm); err != nil {
					t.Fatal(err)
				}
				m := metricsByName(rm)
				if n := sumInt(m[outbox.MetricDeadLettered]); n != 2 {
					t.Errorf("%s = %d, want 2", outbox.MetricDeadLettered, n)
				}
				// Only the oversized rows ever fail: each is produced on its own
				// (in its round, then once more alone), or not at all.
				failed := sumInt(m[outbox.MetricErrors])
				if wantFailed := map[bool]int64{true: 4, false: 0}[v.tried]; failed != wantFailed {
					t.Errorf("%s = %d, want %d: no batch may be refused for its neighbours' size", outbox.MetricErrors, failed, wantFailed)
				}
				deferred := sumByTopic(m[outbox.MetricDeferred])
				if deferred[small] == 0 {
					t.Errorf("%s = 0 for the 4 KiB topic: the rounds were not capped", outbox.MetricDeferred)
				}
				if deferred[other] != 0 {
					t.Errorf("%s = %d for the topic with the default limit, want 0", outbox.MetricDeferred, deferred[other])
				}
				t.Logf("%d rows deferred to a later round, %d failed produce attempts", deferred[small], failed)
			})
		}
	}
}

// TestSizeCapDescribeRefused: the broker refuses DescribeConfigs (as without the ACL).
// The relay logs it once per topic and publishes as it did before the cap existed:
// nothing waits for the limit, nothing is held back.
func TestSizeCapDescribeRefused(t *testing.T) {
	c := testenv.KafkaCluster(t)
	brokers := c.ListenAddrs()
	topic := testenv.Topic(t, brokers, 2)
	pool := db(t)
	ob := newOutbox(t)
	refused := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.DescribeConfigs}, Err: kerr.TopicAuthorizationFailed, Count: -1})

	want := map[string]int{}
	for i := range 200 {
		k := keyName(i % 4)
		want[k]++
		enqueue(t, pool, ob, topic, newEvent(t, k, want[k]))
	}
	logs := &records{}
	reader := sdkmetric.NewManualReader()
	// A client batch larger than any default limit: the cap would apply if the limit were known.
	start(t, pool, producer(t, brokers, kgo.ProducerBatchMaxBytes(64<<20), kgo.BrokerMaxWriteBytes(128<<20)), ob,
		outbox.WithBatchSize(50), outbox.WithLogger(slog.New(logs)),
		outbox.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	testenv.Eventually(t, deadline, "the outbox to drain", func() bool { return count(t, pool, "choreo_outbox") == 0 })

	if dups := checkDelivery(t, readAll(t, brokers, topic), want); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	if refused.Hits() == 0 {
		t.Error("the relay never asked for the topic's configs")
	}
	warned := logs.matching("max.message.bytes")
	if len(warned) != 1 {
		t.Fatalf("%d log lines about the unknown limit, want 1 (logged once): %v", len(warned), warned)
	}
	if w := warned[0]; w.Level != slog.LevelWarn || w.attrs["topic"] != topic || w.attrs["reason"] != "describe_configs_failed" ||
		!strings.Contains(w.attrs["err"], "TOPIC_AUTHORIZATION_FAILED") {
		t.Errorf("log line %+v: want a warning naming the topic and the broker's error", w)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if n := sumInt(metricsByName(rm)[outbox.MetricDeferred]); n != 0 {
		t.Errorf("%s = %d with an unknown limit, want 0 (no cap)", outbox.MetricDeferred, n)
	}
}

// pacer makes the relay hand the client its records of topic in groups of n: before the
// producer span of every n-th record starts, it waits until the client has resolved every
// record it was given. A relay whose produce loop runs slower than the broker answers (a
// loaded machine) splits a round over several produce batches in the same way; the pacer
// makes that happen every time rather than now and then.
type pacer struct {
	t                    *testing.T
	n                    int64
	topic                string
	started              atomic.Int64
	buffered, unbuffered atomic.Int64
}

func (p *pacer) OnProduceRecordBuffered(*kgo.Record)          { p.buffered.Add(1) }
func (p *pacer) OnProduceRecordUnbuffered(*kgo.Record, error) { p.unbuffered.Add(1) }

func (p *pacer) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	if s.SpanKind() != trace.SpanKindProducer || s.Name() != "send "+p.topic || p.started.Add(1)%p.n != 0 {
		return
	}
	give := time.Now().Add(deadline) // a hang guard only
	for p.unbuffered.Load() < p.buffered.Load() && time.Now().Before(give) {
		time.Sleep(50 * time.Microsecond)
	}
}

func (p *pacer) OnEnd(sdktrace.ReadOnlySpan)      {}
func (p *pacer) Shutdown(context.Context) error   { return nil }
func (p *pacer) ForceFlush(context.Context) error { return nil }

// checkDeadLetters asserts that the dead-letter table holds n rows, all of key "huge",
// with MESSAGE_TOO_LARGE in the reason.
func checkDeadLetters(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	rs, err := pool.Query(context.Background(), "SELECT key, reason FROM choreo_outbox_dead ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	got := 0
	for rs.Next() {
		var key, reason string
		if err := rs.Scan(&key, &reason); err != nil {
			t.Fatal(err)
		}
		got++
		if key != "huge" || !strings.Contains(reason, "MESSAGE_TOO_LARGE") {
			t.Errorf("dead letter %q with reason %q", key, reason)
		}
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Errorf("%d dead letters, want the %d oversized rows", got, n)
	}
}

func sumByTopic(a metricdata.Aggregation) map[string]int64 {
	s, _ := a.(metricdata.Sum[int64])
	out := map[string]int64{}
	for _, dp := range s.DataPoints {
		v, _ := dp.Attributes.Value("messaging.destination.name")
		out[v.AsString()] += dp.Value
	}
	return out
}

// records is a slog.Handler that keeps what it is given.
type records struct {
	mu    sync.Mutex
	lines []logLine
}

type logLine struct {
	Level slog.Level
	Msg   string
	attrs map[string]string
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }

func (h *records) Handle(_ context.Context, r slog.Record) error {
	l := logLine{Level: r.Level, Msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		l.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, l)
	return nil
}

func (h *records) WithAttrs(as []slog.Attr) slog.Handler {
	return &shared{root: h, with: as}
}

func (h *records) WithGroup(string) slog.Handler { return h }

// matching returns the lines whose message contains s.
func (h *records) matching(s string) []logLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logLine
	for _, l := range h.lines {
		if strings.Contains(l.Msg, s) {
			out = append(out, l)
		}
	}
	return out
}

// shared is records with attributes, writing into the root's lines.
type shared struct {
	root *records
	with []slog.Attr
}

func (h *shared) Enabled(context.Context, slog.Level) bool { return true }
func (h *shared) Handle(ctx context.Context, r slog.Record) error {
	r2 := r.Clone()
	r2.AddAttrs(h.with...)
	return h.root.Handle(ctx, r2)
}
func (h *shared) WithAttrs(as []slog.Attr) slog.Handler {
	return &shared{root: h.root, with: append(append([]slog.Attr{}, h.with...), as...)}
}
func (h *shared) WithGroup(string) slog.Handler { return h }

// TestSizeCapLimitLowered: a topic's max.message.bytes is lowered while the relay runs.
// The first size refusal makes the relay read the limit again, and the rounds after it
// are capped.
func TestSizeCapLimitLowered(t *testing.T) {
	c := testenv.KafkaCluster(t)
	brokers := c.ListenAddrs()
	topic := testenv.Topic(t, brokers, 1)
	pool := db(t)
	ob := newOutbox(t)
	logs := &records{}
	reader := sdkmetric.NewManualReader()
	start(t, pool, producer(t, brokers, kgo.ProducerBatchCompression(kgo.NoCompression())), ob, outbox.WithLogger(slog.New(logs)),
		outbox.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))

	want := map[string]int{"k00": 1}
	enqueue(t, pool, ob, topic, newEvent(t, "k00", 1))
	testenv.Eventually(t, deadline, "the first row to be published", func() bool { return count(t, pool, "choreo_outbox") == 0 })
	if n := len(logs.matching("capping")); n != 0 {
		t.Fatalf("%d capping log lines with the default limit, want 0", n)
	}

	alterTopic(t, brokers, topic, map[string]*string{"max.message.bytes": ptr("4096")})
	// Refused by the broker (5 KiB, no compression): the relay learns the new limit.
	large, err := event.New("outbox-test", "test.happened", "huge", payload{Key: "huge", Pad: strings.Repeat("x", 5<<10)})
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, pool, ob, topic, large)
	testenv.Eventually(t, deadline, "the refused row to be dead-lettered", func() bool { return count(t, pool, "choreo_outbox_dead") == 1 })

	pad := strings.Repeat("p", 200)
	var evs []event.Event
	for n := range 100 {
		k := keyName(n % 3)
		want[k]++
		ev, err := event.New("outbox-test", "test.happened", k, payload{Key: k, Seq: want[k], Pad: pad})
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	enqueue(t, pool, ob, topic, evs...)
	testenv.Eventually(t, deadline, "the outbox to drain", func() bool { return count(t, pool, "choreo_outbox") == 0 })

	if dups := checkDelivery(t, readAll(t, brokers, topic), want); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	checkDeadLetters(t, pool, 1)
	capping := logs.matching("capping")
	if len(capping) != 1 || capping[0].attrs["topic"] != topic || capping[0].attrs["max_message_bytes"] != "4096" {
		t.Errorf("capping log lines %+v, want one for %s with max_message_bytes 4096", capping, topic)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if n := sumInt(metricsByName(rm)[outbox.MetricDeferred]); n == 0 {
		t.Errorf("%s = 0 after the limit was lowered: the rounds were not capped", outbox.MetricDeferred)
	}
}
