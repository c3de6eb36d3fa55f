// Command interop produces choreo events for the cross-language check
// (scripts/interop-check.sh, make interop-check): the envelope, headers, signature and
// trace context the services write, through a producer built from the service kit's
// settings (app.LoadConfig: KAFKA_BROKERS, KAFKA_COMPRESSION with its default, the
// KAFKA_SASL_* and KAFKA_TLS* security settings) the way app.New builds its producer.
// It creates the topic when missing. Most events go out in large batches, the last ones
// one record per batch. It writes the Ed25519 public key that verifies the events'
// choreo_signature headers to -pubkey and prints what it sent.
package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/tracing"
)

// batches counts the batches the producer wrote, through kgo's hook.
type batches struct{ n, records, raw, wire atomic.Int64 }

func (b *batches) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	b.n.Add(1)
	b.records.Add(int64(m.NumRecords))
	b.raw.Add(int64(m.UncompressedBytes))
	b.wire.Add(int64(m.CompressedBytes))
}

// steps is the saga each order goes through: type and source of each event.
var steps = [][2]string{{"order.created", "order"}, {"payment.authorized", "payment"}, {"stock.reserved", "inventory"}}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "interop:", err)
		os.Exit(1)
	}
}

func run() error {
	topic := flag.String("topic", "interop.events", "`topic` to produce to")
	orders := flag.Int("orders", 40, "orders whose saga events to produce (3 events each)")
	partitions := flag.Int("partitions", 3, "partitions of the topic, when it is created")
	single := flag.Int("single", 6, "of those events, how many to produce last, one record per batch")
	pubOut := flag.String("pubkey", "", "write the signing public key (PEM) to this `file`")
	flag.Parse()

	env := app.NewEnv(os.LookupEnv)
	cfg := app.LoadConfig(env, "interop", "127.0.0.1:0")
	if err := env.Err(); err != nil {
		return err
	}
	compression, err := app.KafkaCompressionOption(cfg.KafkaCompression)
	if err != nil {
		return err
	}
	sec, err := cfg.KafkaSecurity.Options()
	if err != nil {
		return err
	}
	var stats batches
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.KafkaBrokers...), kgo.ClientID(cfg.Service),
		compression, kgo.WithHooks(&stats)}, sec...)...)
	if err != nil {
		return err
	}
	defer cl.Close()

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	signer, err := event.NewEd25519Signer(priv)
	if err != nil {
		return err
	}
	if *pubOut != "" {
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			return err
		}
		if err := os.WriteFile(*pubOut, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
			return err
		}
	}

	var recs []*kgo.Record
	for i := range *orders {
		id := fmt.Sprintf("ord-%06d", 48000+i)
		// One trace per saga, sampled, as a service with an exporter starts it.
		var tid trace.TraceID
		var sid trace.SpanID
		_, _ = rand.Read(tid[:])
		_, _ = rand.Read(sid[:])
		ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
		var prev event.Event
		for s, step := range steps {
			e, err := event.New(step[1], step[0], id, map[string]any{
				"order_id": id, "customer_id": fmt.Sprintf("c-%03d", i%17), "amount_cents": 1000 + 25*i, "currency": "EUR"})
			if err != nil {
				return err
			}
			if s > 0 {
				e = e.CausedBy(prev)
			}
			prev = e
			r, err := event.ToRecord(*topic, e)
			if err != nil {
				return err
			}
			signer.Sign(r)
			tracing.Inject(ctx, r)
			recs = append(recs, r)
		}
	}
	if *single > len(recs) {
		*single = len(recs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := app.EnsureTopics(ctx, cl, int32(*partitions), *topic); err != nil {
		return err
	}
	bulk := recs[:len(recs)-*single]
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	for _, r := range bulk {
		wg.Add(1)
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("produce: %w", firstErr)
	}
	for _, r := range recs[len(bulk):] {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	fmt.Printf("interop: produced %d events to %s with KAFKA_COMPRESSION=%s: %d batches, %d bytes of records, %d bytes on the wire\n",
		len(recs), *topic, cfg.KafkaCompression, stats.n.Load(), stats.raw.Load(), stats.wire.Load())
	return nil
}
