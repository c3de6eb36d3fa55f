package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDLQReadRefusesCompressionBomb: sagactl's own clients take the services' fetch
// limits (consumer.FetchLimits), so a compressed batch in a dead-letter topic that
// decompresses past 8 × the default record bound (a 64 MiB value of one repeated block)
// is refused with an error naming it instead of being decompressed whole.
func TestDLQReadRefusesCompressionBomb(t *testing.T) {
	f := newDLQFixture(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...), kgo.ProducerBatchCompression(kgo.ZstdCompression()),
		kgo.ProducerBatchMaxBytes(96<<20), kgo.MaxBufferedBytes(256<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	bomb := bytes.Repeat(bytes.Repeat([]byte("a"), 16<<10), 4096) // 64 MiB
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: f.dlq, Partition: 0, Value: bomb}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	code, out, errs := sagactl(t, f.brokers, "dlq", "list", f.dlq)
	if code == exitOK || !strings.Contains(errs, "decompress") {
		t.Fatalf("dlq list of a bomb: exit %d, want a failure naming the decompression bound:\n%s%s", code, out, errs)
	}
}
