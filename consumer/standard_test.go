package consumer

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/backoff"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// chainEnv is a topic, its dead-letter topic, a database, a Redis locker and a DLQ
// producer: everything Standard needs.
type chainEnv struct {
	brokers  []string
	topic    string
	dlq      string
	group    string
	pool     *pgxpool.Pool
	locker   *lock.Locker
	producer *kgo.Client
}

func newChainEnv(t *testing.T, partitions int32) *chainEnv {
	t.Helper()
	brokers := testenv.Kafka(t)
	rdb, ns := testenv.Redis(t)
	return &chainEnv{
		brokers:  brokers,
		topic:    testenv.Topic(t, brokers, partitions),
		dlq:      testenv.Topic(t, brokers, 1),
		group:    testenv.Name(t, "g"),
		pool:     newDB(t),
		locker:   newLocker(t, rdb, lock.WithNamespace(ns)),
		producer: newProducer(t, brokers),
	}
}

func (e *chainEnv) standard(t *testing.T, cfg StandardConfig) Handler {
	t.Helper()
	cfg.DB = e.pool
	cfg.DeadLetter = e.producer
	cfg.Locker = e.locker
	cfg.Fence = true
	if cfg.Name == "" {
		cfg.Name = "seq"
	}
	if cfg.Router == nil && cfg.Handler == nil {
		cfg.Handler = applySeq
	}
	if cfg.Retry.BaseDelay == 0 {
		cfg.Retry.BaseDelay = time.Millisecond
		cfg.Retry.MaxDelay = 20 * time.Millisecond
	}
	h, err := Standard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (e *chainEnv) consumer(t *testing.T, h Handler, opts ...Option) *Consumer {
	t.Helper()
	c, err := New(e.brokers, e.group, []string{e.topic}, h,
		append([]Option{fastGroup(), WithDeadLetterTopics(e.dlqOf)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dlqOf names every topic's dead-letter topic: e.dlq.
func (e *chainEnv) dlqOf(string) string { return e.dlq }

func (e *chainEnv) effects(t *testing.T) int {
	return count(t, e.pool, `SELECT count(*) FROM effects`)
}

func (e *chainEnv) dlqLen(t *testing.T) int64 {
	return endOffsets(t, e.brokers, e.dlq)[0]
}

// waitCommitted waits until the group has committed every record of the topic.
func (e *chainEnv) waitCommitted(t *testing.T) {
	t.Helper()
	ends := endOffsets(t, e.brokers, e.topic)
	waitFor(t, "offsets committed", func() bool { return mapsEqual(committed(t, e.brokers, e.group, e.topic), ends) })
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// The same record produced three times, and a redelivery forced by a crash between the
// transaction's commit and the offset commit, have exactly one business effect.
func TestStandardDuplicatesHaveOneEffect(t *testing.T) {
	e := newChainEnv(t, 1)
	first := eventRecord(t, e.topic, "test.step", "k", seqPayload{Seq: 1})
	second := eventRecord(t, e.topic, "test.step", "k", seqPayload{Seq: 2})
	third := eventRecord(t, e.topic, "test.step", "k", seqPayload{Seq: 3})
	// first three times, then second, then third.
	produce(t, e.producer, first, cloneRecord(first), cloneRecord(first), second, third)

	// Consumer 1 "crashes" right after the transaction of `second` commits: its worker
	// stops before marking the offset, and the consumer is shut down.
	var crashed atomic.Bool
	crash := func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			if crashed.Load() {
				return errStopping
			}
			err := next(ctx, m)
			if err == nil && m.Decoded && m.Event.ID == header(second, event.HeaderID) {
				crashed.Store(true)
				return errStopping
			}
			return err
		}
	}
	var outcomes sync.Map
	count := func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			err := next(ctx, m)
			if err == nil {
				v, _ := outcomes.LoadOrStore(m.Outcome, new(atomic.Int32))
				v.(*atomic.Int32).Add(1)
			}
			return err
		}
	}
	h := e.standard(t, StandardConfig{})
	r1 := start(t, e.consumer(t, wrap(h, crash, count)))
	waitFor(t, "crash after the second commit", crashed.Load)
	if err := r1.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := committed(t, e.brokers, e.group, e.topic)[0]; got != 3 {
		t.Fatalf("committed offset %d after the crash, want 3 (second's offset not committed)", got)
	}

	start(t, e.consumer(t, wrap(h, count)))
	e.waitCommitted(t)
	if n := e.effects(t); n != 3 {
		t.Errorf("%d effects, want 3 (one per distinct event)", n)
	}
	if n := count2(&outcomes, OutcomeDuplicate); n != 3 {
		t.Errorf("%d duplicates skipped, want 3 (two copies of first, one redelivery of second)", n)
	}
	if n := e.dlqLen(t); n != 0 {
		t.Errorf("%d records dead-lettered, want 0", n)
	}
}

func count2(m *sync.Map, o Outcome) int32 {
	v, ok := m.Load(o)
	if !ok {
		return 0
	}
	return v.(*atomic.Int32).Load()
}

func cloneRecord(r *kgo.Record) *kgo.Record {
	return &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: append([]kgo.RecordHeader(nil), r.Headers...)}
}

// Poison records (undecodable, unknown type, key reuse, a panicking handler) go to the
// dead-letter topic at once with their reason, and the records behind them on the same
// partition are handled.
func TestStandardPoisonRecordsAreDeadLettered(t *testing.T) {
	e := newChainEnv(t, 1)
	good := func(seq int) *kgo.Record { return eventRecord(t, e.topic, "test.step", "k", seqPayload{Seq: seq}) }
	g1 := good(1)
	undecodable := &kgo.Record{Topic: e.topic, Key: []byte("k"), Value: []byte(`{"seq":99}`)} // no ce_* headers
	unknown := eventRecord(t, e.topic, "test.unknown", "k", seqPayload{Seq: 99})
	reused := cloneRecord(g1) // same event id, different payload
	reused.Value = []byte(`{"seq":100}`)
	panics := eventRecord(t, e.topic, "test.panic", "k", seqPayload{Seq: 99})
	recs := []*kgo.Record{g1, undecodable, good(2), unknown, good(3), reused, good(4), panics, good(5)}
	produce(t, e.producer, recs...)

	router := NewRouter().
		Handle("test.step", applySeq).
		Handle("test.panic", func(context.Context, pgx.Tx, event.Event) error { panic("boom") }).
		Ignore("test.ignored")
	start(t, e.consumer(t, e.standard(t, StandardConfig{Router: router})))
	e.waitCommitted(t)

	if n := count(t, e.pool, `SELECT count(*) FROM entities WHERE key = 'k' AND seq = 5`); n != 1 || e.effects(t) != 5 {
		t.Errorf("good records: %d effects, key at 5: %d; want 5 effects, all handled", e.effects(t), n)
	}
	dead := readTopic(t, e.brokers, e.dlq, 4)
	want := []struct {
		src    *kgo.Record
		reason string
	}{
		{undecodable, ReasonMalformed},
		{unknown, ReasonUnknownType},
		{reused, ReasonKeyReused},
		{panics, ReasonPanic},
	}
	for i, w := range want {
		d := dead[i]
		if got := header(d, HeaderDLQReason); got != w.reason {
			t.Errorf("dead letter %d: reason %q, want %q (error %s)", i, got, w.reason, header(d, HeaderDLQError))
		}
		if string(d.Key) != string(w.src.Key) || string(d.Value) != string(w.src.Value) {
			t.Errorf("dead letter %d: key/value %s/%s, want the original %s/%s", i, d.Key, d.Value, w.src.Key, w.src.Value)
		}
		for _, h := range w.src.Headers {
			if header(d, h.Key) != string(h.Value) {
				t.Errorf("dead letter %d: original header %s lost", i, h.Key)
			}
		}
		if header(d, HeaderDLQTopic) != e.topic || header(d, HeaderDLQPartition) != "0" ||
			header(d, HeaderDLQGroup) != e.group || header(d, HeaderDLQAttempts) != "1" ||
			header(d, HeaderDLQError) == "" || header(d, HeaderDLQFailedAt) == "" || header(d, HeaderDLQTimestamp) == "" {
			t.Errorf("dead letter %d: incomplete headers %v", i, d.Headers)
		}
		if _, err := strconv.ParseInt(header(d, HeaderDLQOffset), 10, 64); err != nil {
			t.Errorf("dead letter %d: offset header: %v", i, err)
		}
	}
	if header(dead[0], HeaderDLQOffset) != "1" || header(dead[3], HeaderDLQOffset) != "7" {
		t.Errorf("dead letters carry offsets %s and %s, want 1 and 7", header(dead[0], HeaderDLQOffset), header(dead[3], HeaderDLQOffset))
	}
}

// A retryable failure that recovers on the third attempt is handled once and not
// dead-lettered; the backoff delays stay within their full-jitter bounds.
func TestStandardRetryRecoversOnThirdAttempt(t *testing.T) {
	e := newChainEnv(t, 1)
	produce(t, e.producer, seqEvents(t, e.topic, []string{"k"}, 3)...)

	var calls atomic.Int32
	flaky := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		var p seqPayload
		if err := ev.DecodeData(&p); err != nil {
			return err
		}
		if p.Seq == 2 && calls.Add(1) < 3 {
			return errors.New("transient: connection reset")
		}
		return applySeq(ctx, tx, ev)
	}
	var mu sync.Mutex
	var delays []time.Duration
	var attempts []int
	policy := RetryConfig{
		MaxAttempts: 5, BaseDelay: 2 * time.Millisecond, MaxDelay: 50 * time.Millisecond,
		OnRetry: func(_ context.Context, m *Message, _ error, d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			delays = append(delays, d)
			attempts = append(attempts, m.Attempt)
		},
	}
	start(t, e.consumer(t, e.standard(t, StandardConfig{Handler: flaky, Retry: policy})))
	e.waitCommitted(t)

	if n := e.effects(t); n != 3 {
		t.Errorf("%d effects, want 3", n)
	}
	if calls.Load() != 3 {
		t.Errorf("handler called %d times for the flaky event, want 3", calls.Load())
	}
	if n := e.dlqLen(t); n != 0 {
		t.Errorf("%d records dead-lettered, want 0", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(delays) != 2 {
		t.Fatalf("%d backoffs, want 2", len(delays))
	}
	for i, d := range delays {
		if bound := (backoff.Policy{Base: policy.BaseDelay, Max: policy.MaxDelay}).Bound(attempts[i]); d <= 0 || d > bound {
			t.Errorf("backoff after attempt %d = %v, outside (0, %v]", attempts[i], d, bound)
		}
	}
}

// A failure that outlasts the retry policy is dead-lettered with reason
// retries_exhausted and the number of attempts.
func TestStandardRetriesExhausted(t *testing.T) {
	e := newChainEnv(t, 1)
	produce(t, e.producer, seqEvents(t, e.topic, []string{"k"}, 2)...)
	failing := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		var p seqPayload
		if err := ev.DecodeData(&p); err != nil {
			return err
		}
		if p.Seq == 1 {
			return errors.New("downstream unavailable")
		}
		return nil
	}
	start(t, e.consumer(t, e.standard(t, StandardConfig{Handler: failing, Retry: RetryConfig{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}})))
	e.waitCommitted(t)
	d := readTopic(t, e.brokers, e.dlq, 1)[0]
	if header(d, HeaderDLQReason) != ReasonRetriesExhausted || header(d, HeaderDLQAttempts) != "3" {
		t.Errorf("reason %q attempts %q, want %q and 3", header(d, HeaderDLQReason), header(d, HeaderDLQAttempts), ReasonRetriesExhausted)
	}
}

func TestStandardValidates(t *testing.T) {
	pool := testenv.Postgres(t)
	producer := newProducer(t, testenv.Kafka(t))
	tests := []struct {
		name string
		cfg  StandardConfig
	}{
		{"no db", StandardConfig{DeadLetter: producer, Handler: applySeq}},
		{"no dead letter", StandardConfig{DB: pool, Handler: applySeq}},
		{"no handler", StandardConfig{DB: pool, DeadLetter: producer}},
		{"handler and router", StandardConfig{DB: pool, DeadLetter: producer, Handler: applySeq, Router: NewRouter()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Standard(tt.cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Standard: %v, want ErrInvalidConfig", err)
			}
			if _, err := StandardBatch(tt.cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("StandardBatch: %v, want ErrInvalidConfig", err)
			}
		})
	}
}
