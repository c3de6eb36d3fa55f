package app

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// envKafkaCompression names the batch compression of every Kafka producer the App
// builds (the outbox relay and dead-lettering share one): none, gzip, snappy, lz4 or
// zstd (case-insensitive). See [DefaultKafkaCompression].
const envKafkaCompression = "KAFKA_COMPRESSION"

// kafkaCompressions lists the values KAFKA_COMPRESSION accepts.
var kafkaCompressions = []string{"none", "gzip", "snappy", "lz4", "zstd"}

// KafkaCompressionOption returns the franz-go option that makes a producer compress
// its batches with the codec named name (one of kafkaCompressions, case-insensitive;
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
		return kgo.CompressionCodec{}, fmt.Errorf("%w: %s=%q: %s", ErrInvalidConfig, envKafkaCompression, name, compressionReason)
	}
}

// compressionReason is the problem reported for an unknown KAFKA_COMPRESSION value.
var compressionReason = "want one of " + strings.Join(kafkaCompressions, ", ")
