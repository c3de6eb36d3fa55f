package consumer

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/lock"
)

// Batch mode: records of a partition share transactions; duplicates are skipped, the
// order per key holds, and a poison record in a batch makes the batch fall back to the
// one-at-a-time chain, which dead-letters only the poison record.
func TestStandardBatch(t *testing.T) {
	e := newChainEnv(t, 2)
	const perKey = 40
	ks := keys(8)
	recs := seqEvents(t, e.topic, ks, perKey)
	// Duplicates and poison records in the middle of the stream.
	poison := []*kgo.Record{
		{Topic: e.topic, Key: []byte(ks[0]), Value: []byte(`{}`)}, // undecodable
		eventRecord(t, e.topic, "test.unknown", ks[1], seqPayload{Seq: 1}),
	}
	// A record delivered three times in a row lands in one batch with its copies.
	mixed := []*kgo.Record{recs[0], cloneRecord(recs[0]), cloneRecord(recs[0])}
	mixed = append(mixed, recs[1:len(recs)/2]...)
	mixed = append(mixed, poison...)
	mixed = append(mixed, cloneRecord(recs[1]), cloneRecord(recs[2]))
	mixed = append(mixed, recs[len(recs)/2:]...)
	produce(t, e.producer, mixed...)

	router := NewRouter().Handle("test.step", applySeq)
	cfg := StandardConfig{Router: router}
	single := e.standard(t, cfg)
	cfg.DB, cfg.DeadLetter, cfg.Locker, cfg.Name, cfg.Fence = e.pool, e.producer, e.locker, "seq", true
	reader := sdkmetric.NewManualReader()
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	batch, err := StandardBatch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var batches, batched, failed atomic.Int64
	counting := func(ctx context.Context, ms []*Message) error {
		err := batch(ctx, ms)
		if err != nil {
			failed.Add(1)
			return err
		}
		batches.Add(1)
		batched.Add(int64(len(ms)))
		return nil
	}
	start(t, e.consumer(t, single, WithBatch(16, counting), WithMaxBuffered(64)))
	e.waitCommitted(t)

	total := len(ks) * perKey
	if n := e.effects(t); n != total {
		t.Errorf("%d effects, want %d", n, total)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM entities WHERE seq = $1`, perKey); n != len(ks) {
		t.Errorf("%d of %d keys complete and in order", n, len(ks))
	}
	if batches.Load() == 0 || batched.Load() <= batches.Load() {
		t.Errorf("%d batches of %d records: batch mode never batched", batches.Load(), batched.Load())
	}
	if failed.Load() == 0 {
		t.Error("no batch failed, so the fallback path was not exercised")
	}
	dead := readTopic(t, e.brokers, e.dlq, 2)
	got := map[string]bool{header(dead[0], HeaderDLQReason): true, header(dead[1], HeaderDLQReason): true}
	if !got[ReasonMalformed] || !got[ReasonUnknownType] {
		t.Errorf("dead-letter reasons %v, want malformed and unknown_type", got)
	}
	if n := e.dlqLen(t); n != 2 {
		t.Errorf("%d dead letters, want 2", n)
	}
	var sizes metricdata.HistogramDataPoint[int64]
	for _, dp := range collect(t, reader)[MetricBatchSize].Data.(metricdata.Histogram[int64]).DataPoints {
		sizes.Count += dp.Count
		sizes.Sum += dp.Sum
	}
	if sizes.Count != uint64(batches.Load()) || sizes.Sum != batched.Load() {
		t.Errorf("%s: %d batches of %d records recorded, want %d of %d",
			MetricBatchSize, sizes.Count, sizes.Sum, batches.Load(), batched.Load())
	}
	t.Logf("%d batches, %d records batched, %d batches fell back", batches.Load(), batched.Load(), failed.Load())
}

// Stopping a consumer in batch mode while batches are in their transactions loses
// nothing: every committed offset belongs to a handled record, and a second consumer
// handles the rest once each, in order per key.
func TestStandardBatchShutdown(t *testing.T) {
	e := newChainEnv(t, 2)
	const perKey = 60
	ks := keys(6)
	total := len(ks) * perKey
	produce(t, e.producer, seqEvents(t, e.topic, ks, perKey)...)

	var slow atomic.Bool
	slow.Store(true)
	slowSeq := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if slow.Load() {
			time.Sleep(time.Millisecond) // keeps batches in flight when Run is cancelled
		}
		return applySeq(ctx, tx, ev)
	}
	cfg := StandardConfig{Handler: slowSeq}
	single := e.standard(t, cfg)
	cfg.DB, cfg.DeadLetter, cfg.Locker, cfg.Name, cfg.Fence = e.pool, e.producer, e.locker, "seq", true
	batch, err := StandardBatch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var batched atomic.Int64
	counting := func(ctx context.Context, ms []*Message) error {
		err := batch(ctx, ms)
		if err == nil {
			batched.Add(int64(len(ms)))
		}
		return err
	}

	r1 := start(t, e.consumer(t, single, WithBatch(8, counting), WithMaxBuffered(64)))
	waitFor(t, "a third handled", func() bool { return e.effects(t) >= total/3 })
	if err := r1.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	handled := e.effects(t)
	var commitSum int64
	for _, off := range committed(t, e.brokers, e.group, e.topic) {
		commitSum += off
	}
	if commitSum > int64(handled) {
		t.Fatalf("committed %d offsets but only %d records were handled: loss", commitSum, handled)
	}
	if handled >= total {
		t.Fatalf("the shutdown did not interrupt the stream (handled %d of %d)", handled, total)
	}
	if batched.Load() == 0 {
		t.Fatal("no batch committed before the shutdown: batch mode was not exercised")
	}

	slow.Store(false)
	start(t, e.consumer(t, single, WithBatch(8, counting)))
	e.waitCommitted(t)
	if n := e.effects(t); n != total {
		t.Errorf("%d effects, want %d", n, total)
	}
	if n := count(t, e.pool, `SELECT count(DISTINCT event_id) FROM effects`); n != total {
		t.Errorf("%d distinct events, want %d", n, total)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM entities WHERE seq = $1`, perKey); n != len(ks) {
		t.Errorf("%d of %d keys complete and in order", n, len(ks))
	}
}

// countingLocker is a real Locker that records, per AcquireAll, how many entities it was
// given and how many leases it returned.
type countingLocker struct {
	Locker
	mu            sync.Mutex
	asked, leases []int
}

func (l *countingLocker) AcquireAll(ctx context.Context, entities []string) ([]*lock.Lease, error) {
	leases, err := l.Locker.AcquireAll(ctx, entities)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked, l.leases = append(l.asked, len(entities)), append(l.leases, len(leases))
	return leases, err
}

// A batch may hold several records of one entity: it holds one lease per distinct entity
// for the whole batch and handles each entity's records in offset order in its one
// transaction. A batch of duplicates only rolls back and runs no AfterCommit hook.
func TestStandardBatchRepeatedEntities(t *testing.T) {
	e := newChainEnv(t, 1)
	recs := seqEvents(t, e.topic, []string{"a", "b"}, 3) // a1 b1 a2 b2 a3 b3
	msgs := func() []*Message {
		ms := make([]*Message, len(recs))
		for i, r := range recs {
			r.Offset = int64(i)
			ms[i] = &Message{Record: r, Group: e.group}
		}
		return ms
	}
	l := &countingLocker{Locker: e.locker}
	var commits atomic.Int64
	batch, err := StandardBatch(StandardConfig{
		DB: e.pool, DeadLetter: e.producer, Handler: applySeq, Locker: l, Fence: true, Name: "seq",
		AfterCommit: []func(){func() { commits.Add(1) }},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	ms := msgs()
	if err := batch(ctx, ms); err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM entities WHERE seq = 3`); n != 2 {
		t.Errorf("%d of 2 entities complete and in order", n)
	}
	if n := e.effects(t); n != len(recs) {
		t.Errorf("%d effects, want %d", n, len(recs))
	}
	if len(l.asked) != 1 || l.asked[0] != len(recs) || l.leases[0] != 2 {
		t.Errorf("AcquireAll calls: entities %v, leases %v; want one call, %d entities, 2 leases", l.asked, l.leases, len(recs))
	}
	for _, m := range ms {
		if m.outcome(nil) != OutcomeHandled || m.lease != nil {
			t.Errorf("offset %d: outcome %q, lease %v after the batch", m.Record.Offset, m.outcome(nil), m.lease)
		}
	}
	if n := commits.Load(); n != 1 {
		t.Errorf("AfterCommit ran %d times, want once", n)
	}

	ms = msgs()
	if err := batch(ctx, ms); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Outcome != OutcomeDuplicate {
			t.Errorf("offset %d redelivered: outcome %q, want duplicate", m.Record.Offset, m.outcome(nil))
		}
	}
	if n := e.effects(t); n != len(recs) {
		t.Errorf("%d effects after redelivery, want %d", n, len(recs))
	}
	if n := commits.Load(); n != 1 {
		t.Errorf("AfterCommit ran %d times after a batch of duplicates, want 1 in all", n)
	}
}
