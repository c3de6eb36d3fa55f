package app

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// EnvKafkaCompression names the batch compression of every Kafka producer the App
// builds (the outbox relay and dead-lettering share one): none, gzip, snappy, lz4 or
// zstd (case-insensitive). See [DefaultKafkaCompression].
const EnvKafkaCompression = "KAFKA_COMPRESSION"

// DefaultKafkaCompression is KAFKA_COMPRESSION when it is not set: gzip.
//
// A consumer must decode the codec of every batch it reads, and only none and gzip are
// decoded by the stock consumers of all the mainstream clients: the Java client,
// librdkafka and its wrappers (confluent-kafka-go, -python, -dotnet), Sarama,
// franz-go, and kafkajs, which reads gzip natively but needs a codec plugin for snappy,
// lz4 and zstd (it fails with "Snappy compression not implemented" on franz-go's own
// default, snappy). Between the two, gzip, measured with BenchmarkKafkaCompression
// (producer, in-process broker and consumer together, per choreo event of 460 bytes
// of headers and payload): in batches of 32 events gzip sends 61 bytes per event
// instead of 460 (7.5 times fewer bytes to store, replicate and fetch) for about 2 µs
// more CPU per event (7.8 against 5.5 µs, minimum of 5 runs); a batch of one event
// shrinks to 344 bytes, and the compressor's per-batch set-up costs 10 to 25 µs more
// CPU, but batches stay that small only while the producer keeps up, that is, while
// there is CPU to spare. Beside a handled event's Postgres transaction (a round trip
// alone is 120 to 220 µs) either cost is small. docs/benchmarks.md ("Kafka
// compression") has every codec's figures and docs/interop.md what each client needs.
// Choose snappy, lz4 or zstd when every consumer of the topics reads it, none when CPU
// matters more than bytes.
const DefaultKafkaCompression = "gzip"

// KafkaCompressions lists the values KAFKA_COMPRESSION accepts.
var KafkaCompressions = []string{"none", "gzip", "snappy", "lz4", "zstd"}

// KafkaCompressionOption returns the franz-go option that makes a producer compress
// its batches with the codec named name (one of [KafkaCompressions], case-insensitive;
// "" means [DefaultKafkaCompression]), or an error matching [ErrInvalidConfig]. franz-go
// sends a batch uncompressed when compression would not shrink it, which every
// consumer reads.
func KafkaCompressionOption(name string) (kgo.Opt, error) {
	codec, err := kafkaCodec(name)
	if err != nil {
		return nil, err
	}
	return kgo.ProducerBatchCompression(codec), nil
}

func kafkaCodec(name string) (kgo.CompressionCodec, error) {
	switch n := strings.ToLower(strings.TrimSpace(name)); n {
	case "":
		return kafkaCodec(DefaultKafkaCompression)
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	default:
		return kgo.CompressionCodec{}, fmt.Errorf("%w: %s=%q: %s", ErrInvalidConfig, EnvKafkaCompression, name, compressionReason)
	}
}

// compressionReason is the problem reported for an unknown KAFKA_COMPRESSION value.
var compressionReason = "want one of " + strings.Join(KafkaCompressions, ", ")
