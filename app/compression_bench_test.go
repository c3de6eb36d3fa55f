package app

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
)

// batchBytes counts what a producer wrote to the broker, through kgo's batch hook.
type batchBytes struct{ records, compressed, uncompressed atomic.Int64 }

func (c *batchBytes) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	c.records.Add(int64(m.NumRecords))
	c.compressed.Add(int64(m.CompressedBytes))
	c.uncompressed.Add(int64(m.UncompressedBytes))
}

// BenchmarkKafkaCompression measures what each KAFKA_COMPRESSION codec costs per
// choreo event (CloudEvents binary-mode headers, a traceparent, a 120-byte JSON
// payload): a producer built with KafkaCompressionOption writes batches of 1 and of 32
// events to a one-partition topic of an in-process broker (kfake) and a consumer reads
// them back. cpu-ns/record is the process's CPU (producer, broker and consumer
// together) per event; wire-B/record the batch bytes the producer sent per event, the
// bytes the broker stores and every consumer fetches:
//
//	go test -run '^$' -bench KafkaCompression -benchtime 2000x ./app/
func BenchmarkKafkaCompression(b *testing.B) {
	brokers := testenv.Kafka(b)
	for _, batch := range []int{1, 32} {
		for _, codec := range kafkaCompressions {
			b.Run(fmt.Sprintf("batch=%d/%s", batch, codec), func(b *testing.B) {
				topic := testenv.Topic(b, brokers, 1)
				opt, err := KafkaCompressionOption(codec)
				if err != nil {
					b.Fatal(err)
				}
				var written batchBytes
				producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), opt, kgo.WithHooks(&written))
				if err != nil {
					b.Fatal(err)
				}
				defer producer.Close()
				consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic))
				if err != nil {
					b.Fatal(err)
				}
				defer consumer.Close()
				records := benchEvents(b, topic, batch)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()

				b.ReportAllocs()
				start := cpuTime(b)
				for b.Loop() {
					for _, r := range records {
						r.Partition, r.Offset = 0, 0
					}
					if err := producer.ProduceSync(ctx, records...).FirstErr(); err != nil {
						b.Fatal(err)
					}
					for got := 0; got < batch; {
						fs := consumer.PollFetches(ctx)
						if err := fs.Err0(); err != nil {
							b.Fatal(err)
						}
						got += fs.NumRecords()
					}
				}
				n := float64(b.N * batch)
				b.ReportMetric(float64(cpuTime(b)-start)/n, "cpu-ns/record")
				b.ReportMetric(float64(written.compressed.Load())/float64(written.records.Load()), "wire-B/record")
				b.ReportMetric(float64(written.uncompressed.Load())/float64(written.records.Load()), "raw-B/record")
			})
		}
	}
}

// benchEvents returns n distinct events of one saga step as records for topic, with
// a traceparent as the outbox relay adds.
func benchEvents(b *testing.B, topic string, n int) []*kgo.Record {
	out := make([]*kgo.Record, n)
	for i := range out {
		e, err := event.New("payment", "payment.authorized", fmt.Sprintf("ord-%08d", 48271+i), map[string]any{
			"order_id": fmt.Sprintf("ord-%08d", 48271+i), "customer_id": fmt.Sprintf("cust-%04d", i%97),
			"amount_cents": 1299 + 7*i, "currency": "EUR", "payment_id": fmt.Sprintf("pay-%08d", 90000+i),
		})
		if err != nil {
			b.Fatal(err)
		}
		r, err := event.ToRecord(topic, e)
		if err != nil {
			b.Fatal(err)
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "traceparent",
			Value: fmt.Appendf(nil, "00-4bf92f3577b34da6a3ce929d0e0e%04x-00f067aa0ba9%04x-01", i, i)})
		out[i] = r
	}
	return out
}
