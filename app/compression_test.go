package app_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
)

func TestKafkaCompressionConfig(t *testing.T) {
	env := app.MapEnv(nil)
	cfg := app.LoadConfig(env, "svc", ":8080")
	if err := env.Err(); err != nil || cfg.KafkaCompression != app.DefaultKafkaCompression || app.DefaultKafkaCompression != "gzip" {
		t.Fatalf("default: %q, %v; want gzip", cfg.KafkaCompression, err)
	}
	env = app.MapEnv(map[string]string{"KAFKA_COMPRESSION": " ZSTD "})
	if cfg := app.LoadConfig(env, "svc", ":8080"); env.Err() != nil || cfg.KafkaCompression != "zstd" {
		t.Fatalf("ZSTD: %q, %v", cfg.KafkaCompression, env.Err())
	}

	env = app.MapEnv(map[string]string{"KAFKA_COMPRESSION": "brotli"})
	bad := app.LoadConfig(env, "svc", ":8080")
	err := env.Err()
	if !errors.Is(err, app.ErrInvalidConfig) || !strings.Contains(err.Error(), `KAFKA_COMPRESSION="brotli": want one of none, gzip, snappy, lz4, zstd`) {
		t.Fatalf("brotli: %v", err)
	}
	if err := bad.Validate(); !errors.Is(err, app.ErrInvalidConfig) || !strings.Contains(err.Error(), "KAFKA_COMPRESSION") {
		t.Fatalf("Validate: %v", err)
	}
	if _, err := app.New(context.Background(), bad.Service, app.WithConfig(bad)); !errors.Is(err, app.ErrInvalidConfig) {
		t.Fatalf("New: %v", err)
	}
	if _, err := app.KafkaCompressionOption("brotli"); !errors.Is(err, app.ErrInvalidConfig) {
		t.Fatalf("KafkaCompressionOption: %v", err)
	}
	if !strings.Contains(strings.Join(app.EnvVars(), " "), "KAFKA_COMPRESSION") {
		t.Error("EnvVars lacks KAFKA_COMPRESSION")
	}
}

// codecs records the compression of every batch a consumer fetched (kgo's codes:
// 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
type codecs struct {
	mu   sync.Mutex
	seen map[uint8]int
}

func (c *codecs) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[m.CompressionType]++
}

// readCodecs consumes n records of topic and returns the codecs of their batches,
// checking that each record decodes as a choreo event.
func readCodecs(t *testing.T, brokers []string, topic string, n int) map[uint8]int {
	t.Helper()
	c := &codecs{seen: map[uint8]int{}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.WithHooks(c))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		for _, r := range fs.Records() {
			if _, err := event.FromRecord(r); err != nil {
				t.Fatalf("record %d: %v", got, err)
			}
			got++
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen
}

// produceEvents produces n events to topic with cl in one batch.
func produceEvents(t *testing.T, cl *kgo.Client, topic string, n int) {
	t.Helper()
	var recs []*kgo.Record
	for i := range n {
		e, err := event.New("widget", "widget.made", fmt.Sprintf("w-%d", i), map[string]any{"id": i, "color": "blue"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := event.ToRecord(topic, e)
		if err != nil {
			t.Fatal(err)
		}
		r.Partition = 0
		recs = append(recs, r)
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// Every KAFKA_COMPRESSION value reaches the wire as that codec.
func TestKafkaCompressionOnTheWire(t *testing.T) {
	brokers := testenv.Kafka(t)
	for code, name := range app.KafkaCompressions {
		t.Run(name, func(t *testing.T) {
			topic := testenv.Topic(t, brokers, 1)
			opt, err := app.KafkaCompressionOption(name)
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), opt, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			produceEvents(t, cl, topic, 16)
			if seen := readCodecs(t, brokers, topic, 16); len(seen) != 1 || seen[uint8(code)] == 0 {
				t.Fatalf("batch codecs %v, want only %d (%s)", seen, code, name)
			}
		})
	}
}

// The App's producer (outbox relay, dead-lettering) compresses with gzip by default.
func TestAppProducerCompressesByDefault(t *testing.T) {
	a := newTestApp(t)
	topic := testenv.Topic(t, a.brokers, 1)
	var recs []*kgo.Record
	for i := range 16 {
		e, err := event.New("widget", "widget.made", "w-1", map[string]any{"id": i, "color": "blue"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := event.ToRecord(topic, e)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if err := a.Kafka.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if seen := readCodecs(t, a.brokers, topic, 16); len(seen) != 1 || seen[1] == 0 {
		t.Fatalf("batch codecs %v, want only gzip (1)", seen)
	}
}
