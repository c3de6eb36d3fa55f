package tracker_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

// cancelRequested is the record of the attack on the tracker: a ce_id with a NUL byte,
// which Postgres refuses in text ("invalid byte sequence for encoding UTF8: 0x00").
func cancelRequested(topic, corr string) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte(corr), Value: []byte(`{}`), Headers: []kgo.RecordHeader{
		{Key: event.HeaderSpecVersion, Value: []byte("1.0")},
		{Key: event.HeaderID, Value: []byte("evil\x00id")},
		{Key: event.HeaderType, Value: []byte("order.cancel_requested")},
		{Key: event.HeaderSource, Value: []byte("order")},
		{Key: event.HeaderCorrelationID, Value: []byte(corr)},
	}}
}

// deadLetterCopy is r as DeadLetter copies it to the dead-letter topic.
func deadLetterCopy(r *kgo.Record, reason, errText string) *kgo.Record {
	c := *r
	c.Topic = r.Topic + tracker.DLQSuffix
	c.Headers = append(slices.Clip(r.Headers),
		kgo.RecordHeader{Key: consumer.HeaderDLQReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: consumer.HeaderDLQError, Value: []byte(errText)})
	return &c
}

// hostileSetup is a topic with its dead-letter topic, a producer and a tracker with a
// manual metric reader.
type hostileSetup struct {
	ctx     context.Context
	db      *pgxpool.Pool
	brokers []string
	topic   string
	cl      *kgo.Client
	reader  *sdkmetric.ManualReader
	group   string
}

func newHostile(t *testing.T, ctx context.Context, producerOpts ...kgo.Opt) *hostileSetup {
	t.Helper()
	h := &hostileSetup{ctx: ctx, db: testenv.Postgres(t), brokers: testenv.Kafka(t), reader: sdkmetric.NewManualReader()}
	h.topic = testenv.Topic(t, h.brokers, 1)
	h.group = testenv.Name(t, "tracker")
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(h.brokers...)}, producerOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	h.cl = cl
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, h.topic+tracker.DLQSuffix); err != nil || resp.Err != nil {
		t.Fatalf("create dlq topic: %v %v", err, resp.Err)
	}
	if err := tracker.Migrate(ctx, h.db, ""); err != nil {
		t.Fatal(err)
	}
	return h
}

// run starts a tracker in h's group until the test ends; its Run error, if it returns
// before, fails the test.
func (h *hostileSetup) run(t *testing.T) *tracker.Tracker {
	t.Helper()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	tr, err := tracker.New(h.db, sagaConfig(h.topic), tracker.WithGroup(h.group),
		tracker.WithRefresh(200*time.Millisecond), tracker.WithMeter(mp.Meter("test")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx, h.brokers) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return tr
}

func (h *hostileSetup) produce(t *testing.T, rs ...*kgo.Record) {
	t.Helper()
	if err := h.cl.ProduceSync(h.ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// waitIndexed waits until the event with ce_id id is indexed.
func (h *hostileSetup) waitIndexed(t *testing.T, id string) {
	t.Helper()
	testenv.Eventually(t, testenv.Timeout, "event "+id+" indexed", func() bool {
		var n int
		if err := h.db.QueryRow(h.ctx, `SELECT count(*) FROM `+tracker.DefaultTable+` WHERE event_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
}

func (h *hostileSetup) counter(t *testing.T, name, reason string) int64 {
	t.Helper()
	m, ok := collect(t, h.reader)[name]
	if !ok {
		return 0
	}
	var n int64
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		if r, _ := dp.Attributes.Value("reason"); reason == "" || r.AsString() == reason {
			n += dp.Value
		}
	}
	return n
}

// TestTrackerSurvivesHostileRecords: the record that stopped the tracker for good (a NUL
// in ce_id) and its dead-letter copy, and every other text field fed from the wire with
// NUL, invalid UTF-8 or an oversize value, are indexed escaped or cut, recorded and
// counted; the records after them are indexed, and a tracker restarted in the same
// group starts after them.
func TestTrackerSurvivesHostileRecords(t *testing.T) {
	ctx := context.Background()
	h := newHostile(t, ctx)
	started, err := event.New("order", "order.created", "o-evil", map[string]string{"id": "o-evil"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := event.ToRecord(h.topic, started)
	if err != nil {
		t.Fatal(err)
	}
	evil := cancelRequested(h.topic, "o-evil")
	// Every other text column, each with something Postgres or its indexes refuse.
	fields := cancelRequested(h.topic, "o-fields")
	fields.Headers = append(fields.Headers,
		kgo.RecordHeader{Key: event.HeaderSubject, Value: []byte("bad\xff\xfeutf8")},
		kgo.RecordHeader{Key: event.HeaderCausationID, Value: bytes.Repeat([]byte("c"), 10_000)},
		kgo.RecordHeader{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e47\x00\x00-00f067aa0ba902b7-01")},
		kgo.RecordHeader{Key: event.HeaderSchemaVersion, Value: []byte("99999999999")})
	longCorr := cancelRequested(h.topic, strings.Repeat("k", 10_000)) // past a B-tree entry
	longType := cancelRequested(h.topic, "o-type")
	longType.Headers[2].Value = bytes.Repeat([]byte("t\x00"), 5_000)
	h.produce(t, first, evil, fields, longCorr, longType,
		deadLetterCopy(evil, "malformed", "consumer: decode: ce_id \x00\xff"))

	tr := h.run(t)
	confirmed, err := event.New("order", "order.confirmed", "o-evil", map[string]string{"id": "o-evil"})
	if err != nil {
		t.Fatal(err)
	}
	confirmed = confirmed.CausedBy(started)
	after, err := event.ToRecord(h.topic, confirmed)
	if err != nil {
		t.Fatal(err)
	}
	h.produce(t, after)
	h.waitIndexed(t, confirmed.ID)

	var rej tracker.Rejections
	testenv.Eventually(t, testenv.Timeout, "the 5 hostile records recorded as escaped", func() bool {
		if rej, err = tr.Rejected(ctx, 10); err != nil {
			t.Fatal(err)
		}
		return rej.Escaped == 5 && rej.Skipped == 0 && len(rej.Latest) == 5
	})
	byOffset := map[string]string{}
	for _, r := range rej.Latest {
		byOffset[fmt.Sprintf("%s@%d", r.Topic, r.Offset)] = r.Detail
	}
	wantDetail := map[string]string{
		h.topic + "@1":                     "escaped or cut: ce_id",
		h.topic + "@2":                     "escaped or cut: ce_id, ce_subject, ce_causationid, ce_dataschemaversion",
		h.topic + "@3":                     "escaped or cut: ce_correlationid, ce_id",
		h.topic + "@4":                     "escaped or cut: ce_id, ce_type",
		h.topic + tracker.DLQSuffix + "@0": "escaped or cut: ce_id, choreo_dlq_error",
	}
	for k, want := range wantDetail {
		if byOffset[k] != want {
			t.Errorf("rejection %s = %q; want %q (all: %v)", k, byOffset[k], want, byOffset)
		}
	}
	if n := h.counter(t, "choreo.tracker.events.escaped", ""); n != 5 {
		t.Errorf("escaped counter = %d; want 5", n)
	}

	// The saga shows the escaped id, live and dead-lettered, and its completion.
	tl, err := tr.Saga(ctx, "o-evil")
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Events) != 3 || !slices.ContainsFunc(tl.Events, func(e tracker.Event) bool {
		return e.ID == `evil\x00id` && e.Type == "order.cancel_requested"
	}) {
		t.Fatalf("events = %+v; want the escaped ce_id with created and confirmed", tl.Events)
	}
	if len(tl.DeadLetters) != 1 || tl.DeadLetters[0].ID != `evil\x00id` || tl.DeadLetters[0].Error != `consumer: decode: ce_id \x00\xff` {
		t.Fatalf("dead letters = %+v; want the escaped copy", tl.DeadLetters)
	}
	if len(tl.Sagas) != 2 || tl.Sagas[0].Saga != "order" || tl.Sagas[0].Status != tracker.StatusCompleted {
		t.Fatalf("sagas = %+v; want the order saga completed (and shipping started)", tl.Sagas)
	}
	var subject, traceID string
	if err := h.db.QueryRow(ctx, `SELECT subject, trace_id FROM `+tracker.DefaultTable+
		` WHERE correlation_id = 'o-fields'`).Scan(&subject, &traceID); err != nil {
		t.Fatal(err)
	}
	if subject != `bad\xff\xfeutf8` || traceID != "" {
		t.Fatalf("o-fields row: subject %q, trace id %q", subject, traceID)
	}
	// A record timestamp past what timestamptz holds, without ce_time (franz-go cannot
	// produce one; another client can): indexed at the time of indexing.
	future := cancelRequested(h.topic, "o-future")
	future.Offset, future.Timestamp = 1000, time.UnixMilli(1<<62)
	if n, err := tr.Ingest(ctx, future); err != nil || n != 1 {
		t.Fatalf("Ingest(timestamp of year %d) = %d, %v; want it indexed", future.Timestamp.Year(), n, err)
	}
	if rej, err := tr.Rejected(ctx, 1); err != nil || rej.Latest[0].Detail != "escaped or cut: ce_id, time" {
		t.Fatalf("Rejected = %+v, %v; want the timestamp replaced", rej, err)
	}
	var corrLen int
	if err := h.db.QueryRow(ctx, `SELECT max(octet_length(correlation_id)) FROM `+tracker.DefaultTable).Scan(&corrLen); err != nil || corrLen > tracker.MaxFieldBytes {
		t.Fatalf("longest stored correlation id = %d bytes, %v; want at most %d", corrLen, err, tracker.MaxFieldBytes)
	}

	// A tracker restarted in the group starts after the hostile records.
	tr2 := h.run(t)
	next, err := event.New("order", "order.created", "o-next", map[string]string{"id": "o-next"})
	if err != nil {
		t.Fatal(err)
	}
	nextRec, err := event.ToRecord(h.topic, next)
	if err != nil {
		t.Fatal(err)
	}
	h.produce(t, nextRec)
	h.waitIndexed(t, next.ID)
	if rej, err := tr2.Rejected(ctx, 0); err != nil || rej.Escaped != 6 {
		t.Fatalf("Rejected after restart = %+v, %v; want the same 6", rej, err)
	}
}

// TestTrackerSkipsRowsPostgresRefuses: a record whose row Postgres refuses even once
// escaped (here a trigger raising a data exception for one ce_id) is skipped, recorded
// and counted, and the records of its poll are indexed.
func TestTrackerSkipsRowsPostgresRefuses(t *testing.T) {
	ctx := context.Background()
	h := newHostile(t, ctx)
	if _, err := h.db.Exec(ctx, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.event_id = 'refuse-me' THEN RAISE EXCEPTION 'refused' USING ERRCODE = '22023'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse BEFORE INSERT ON `+tracker.DefaultTable+` FOR EACH ROW EXECUTE FUNCTION refuse()`); err != nil {
		t.Fatal(err)
	}
	refused := cancelRequested(h.topic, "o-refused")
	refused.Headers[1].Value = []byte("refuse-me")
	ok := cancelRequested(h.topic, "o-ok")
	ok.Headers[1].Value = []byte("fine")
	h.produce(t, refused, ok)
	tr := h.run(t)
	h.waitIndexed(t, "fine")
	var rej tracker.Rejections
	testenv.Eventually(t, testenv.Timeout, "the refused record recorded", func() bool {
		var err error
		if rej, err = tr.Rejected(ctx, 10); err != nil {
			t.Fatal(err)
		}
		return rej.Skipped > 0
	})
	if rej.Skipped != 1 || len(rej.Latest) != 1 || rej.Latest[0].Offset != 0 || rej.Latest[0].Action != tracker.ActionSkipped ||
		!strings.Contains(rej.Latest[0].Detail, "22023") {
		t.Fatalf("Rejected = %+v; want offset 0 skipped with the SQLSTATE", rej)
	}
	if n := h.counter(t, "choreo.tracker.events.skipped", "unstorable"); n != 1 {
		t.Fatalf("skipped{reason=unstorable} = %d; want 1", n)
	}
}

// TestTrackerSkipsCompressionBomb: a batch that decompresses past the client's bound
// (8 × the 1 MiB record limit) is skipped without being decompressed whole, recorded,
// and the record after it is indexed.
func TestTrackerSkipsCompressionBomb(t *testing.T) {
	ctx := context.Background()
	h := newHostile(t, ctx, kgo.ProducerBatchMaxBytes(32<<20), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	bomb := cancelRequested(h.topic, "o-bomb")
	bomb.Headers[1].Value = []byte("bomb")
	bomb.Value = bytes.Repeat([]byte(`{"pad":"abcdefgh"},`), 9<<20/19)
	h.produce(t, bomb) // a batch of its own, at offset 0
	ok := cancelRequested(h.topic, "o-after")
	ok.Headers[1].Value = []byte("after-bomb")
	h.produce(t, ok)
	tr := h.run(t)
	h.waitIndexed(t, "after-bomb")
	rej, err := tr.Rejected(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if rej.Skipped != 1 || len(rej.Latest) != 1 || rej.Latest[0].Offset != 0 || !strings.Contains(rej.Latest[0].Detail, "decompresses past") {
		t.Fatalf("Rejected = %+v; want the bomb at offset 0 skipped", rej)
	}
	if n := h.counter(t, "choreo.tracker.events.skipped", "unstorable"); n != 1 {
		t.Fatalf("skipped{reason=unstorable} = %d; want 1", n)
	}
}
