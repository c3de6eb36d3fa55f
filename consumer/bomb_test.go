package consumer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
)

// bombValue is a JSON value of n bytes made of one repeated 16 KiB block, as the attack
// used: zstd makes a few kilobytes of it.
func bombValue(n int) map[string]string {
	block := strings.Repeat(`{"id":"x","pad":"abcdefgh"},`, 16<<10/28)
	return map[string]string{"blob": strings.Repeat(block, n/len(block)+1)[:n]}
}

// A compression bomb (a batch that decompresses past 8 × the record limit) is never
// decompressed whole: it is dead-lettered as one empty record with reason too_large,
// and the partition moves on to the next record, which is handled. A record under the
// batch bound but over the payload limit, whose copy the dead-letter topic refuses, is
// archived with at most ArchiveValueBytes of its value, and its digest and size.
func TestCompressionBombIsBounded(t *testing.T) {
	const (
		maxRecord    = 64 << 10 // batch bound: 512 KiB
		archiveBytes = 8 << 10
	)
	brokers := testenv.Kafka(t)
	src := testenv.Topic(t, brokers, 1)
	dlq := DeadLetterTopic(src)
	createTopic(t, brokers, dlq, map[string]*string{"max.message.bytes": kadm.StringPtr("16384")})
	pool := newDB(t)
	archive, err := NewDeadLetterArchive(pool, "", ArchiveValueBytes(archiveBytes))
	if err != nil {
		t.Fatal(err)
	}
	newArchive(t, pool, "") // migrates the default table
	producer := newProducer(t, brokers)
	zstd, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(32<<20),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer zstd.Close()

	// Each ProduceSync is a batch of its own: the bomb first (nothing polled or
	// committed on the partition yet), then a record over the payload limit, then a
	// good one.
	bomb := eventRecord(t, src, "test.step", "k", bombValue(16<<20))
	produce(t, zstd, bomb)
	big := eventRecord(t, src, "test.step", "k", bombValue(300<<10))
	produce(t, zstd, big)
	produce(t, producer, eventRecord(t, src, "test.step", "k", seqPayload{Seq: 1}))
	end := endOffsets(t, brokers, src)[0]

	var log syncLog
	h, err := Standard(StandardConfig{
		DB: pool, DeadLetter: producer, DeadLetterArchive: archive, Handler: applySeq,
		Decode: []event.DecodeOption{event.WithMaxPayloadBytes(maxRecord)},
		Logger: slog.New(slog.NewJSONHandler(&log, nil)),
		Retry:  RetryConfig{BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	group := testenv.Name(t, "g")
	c, err := New(brokers, group, []string{src}, h, fastGroup(), WithMaxRecordBytes(maxRecord))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, c)
	waitFor(t, "every record settled and committed", func() bool { return committed(t, brokers, group, src)[0] == end })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM entities WHERE seq = 1`); n != 1 {
		t.Fatalf("the record after the bomb: %d applied, want 1", n)
	}

	copies := readTopic(t, brokers, dlq, 2)
	bh := headerMap(copies[0])
	if bh[HeaderDLQReason] != ReasonTooLarge || bh[HeaderDLQOffset] != "0" || len(copies[0].Value) != 0 ||
		!strings.Contains(bh[HeaderDLQError], "offsets 0 to 0") || !strings.Contains(bh[HeaderDLQError], "MaxDecompressBatchBytes") {
		t.Fatalf("bomb's copy: headers %v, value %d bytes; want reason too_large at offset 0, empty", bh, len(copies[0].Value))
	}
	if h := headerMap(copies[1]); h[HeaderDLQReason] != ReasonMalformed || h[HeaderDLQTruncated] != "true" {
		t.Fatalf("big record's copy: headers %v; want a bounded copy, malformed", h)
	}

	rows := archiveRows(t, pool, DefaultDeadLetterTable)
	if len(rows) != 1 {
		t.Fatalf("%d archive rows, want the big record's only (the bomb's copy fits)", len(rows))
	}
	row := rows[0]
	var stored int
	if err := pool.QueryRow(context.Background(), `SELECT octet_length(value) + octet_length(key) + octet_length(headers::text) FROM `+
		pgx.Identifier{DefaultDeadLetterTable}.Sanitize()).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if len(row.value) != archiveBytes || !bytes.Equal(row.value, big.Value[:archiveBytes]) || row.size != int64(len(big.Value)) ||
		stored > archiveBytes+4<<10 {
		t.Fatalf("archive row: value %d bytes (size %d), %d bytes stored; want the first %d of %d", len(row.value), row.size,
			stored, archiveBytes, len(big.Value))
	}
	last := row.headers[len(row.headers)-2:]
	if last[0].Key != HeaderDLQTruncated || last[1].Key != HeaderDLQOriginalSize || string(last[1].Value) != strconv.Itoa(len(big.Value)) {
		t.Fatalf("archive row headers end with %v; want the truncation summary", last)
	}
}

// The record that stands for a batch past the bound fails to decode with
// ErrBatchTooLarge and reason too_large; a record from the wire never does.
func TestBatchTooLargeRecord(t *testing.T) {
	e := &kgo.ErrDecompressTooLarge{Topic: "t", Partition: 2, Offset: 10, NextOffset: 13}
	r := batchTooLargeRecord(e)
	if r.Offset != 12 || r.Topic != "t" || r.Partition != 2 {
		t.Fatalf("record at %s[%d]@%d; want t[2]@12", r.Topic, r.Partition, r.Offset)
	}
	err := decode(&Message{Record: r}, func(*kgo.Record) (event.Event, error) { return event.Event{}, nil })
	if !errors.Is(err, ErrBatchTooLarge) || !errors.Is(err, kgo.ErrMaxDecompress) || Reason(err) != ReasonTooLarge || Retryable(err) {
		t.Fatalf("decode = %v (reason %q); want ErrBatchTooLarge, too_large, not retryable", err, Reason(err))
	}
	wire := &kgo.Record{Topic: "t", Context: context.Background()}
	if err := batchTooLarge(wire); err != nil {
		t.Fatalf("batchTooLarge(wire record) = %v", err)
	}
}
