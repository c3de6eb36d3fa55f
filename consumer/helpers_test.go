package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
)

// testTimeout bounds how long a test waits for the system to reach a state. It is a
// liveness guard, never a performance assertion.
const testTimeout = 90 * time.Second

// seqPayload is the payload of the test events: the position of the event among the
// events of its key, starting at 1.
type seqPayload struct {
	Seq int `json:"seq"`
}

// newDB returns a fresh database with the idempotency and fence schemas and the test
// business tables: effects (one row per business effect) and entities (the last sequence
// number applied per key).
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testenv.Postgres(t)
	migrateTestDB(t, pool)
	return pool
}

// migrateTestDB creates newDB's schemas and tables in pool's database.
func migrateTestDB(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	if err := migrate.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
CREATE TABLE effects (id bigserial PRIMARY KEY, event_id text NOT NULL, key text NOT NULL, seq int NOT NULL);
CREATE TABLE entities (key text PRIMARY KEY, seq int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

// errOutOfOrder is returned by applySeq when an event of a key arrives out of order.
var errOutOfOrder = errors.New("test: event out of order")

// applySeq is the test business handler: it records one effect and advances the key's
// sequence number, failing permanently if the event is not the key's next one.
func applySeq(ctx context.Context, tx pgx.Tx, ev event.Event) error {
	var p seqPayload
	if err := ev.DecodeData(&p); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO effects (event_id, key, seq) VALUES ($1, $2, $3)`, ev.ID, ev.Subject, p.Seq); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO entities (key, seq) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET seq = EXCLUDED.seq WHERE entities.seq = EXCLUDED.seq - 1`, ev.Subject, p.Seq)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return Permanent(fmt.Errorf("%w: key %s seq %d", errOutOfOrder, ev.Subject, p.Seq))
	}
	return nil
}

// seqEvents returns perKey events for each of keys, interleaved key by key.
func seqEvents(t testing.TB, topic string, keys []string, perKey int) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	for seq := 1; seq <= perKey; seq++ {
		for _, k := range keys {
			recs = append(recs, eventRecord(t, topic, "test.step", k, seqPayload{Seq: seq}))
		}
	}
	return recs
}

func eventRecord(t testing.TB, topic, typ, key string, data any) *kgo.Record {
	t.Helper()
	ev, err := event.New("test", typ, key, data)
	if err != nil {
		t.Fatal(err)
	}
	r, err := event.ToRecord(topic, ev)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("k%03d", i)
	}
	return ks
}

func newProducer(t testing.TB, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// readTopic reads every record of topic from the start until n have arrived.
func readTopic(t testing.TB, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s: got %d of %d records: %v", topic, len(out), n, err)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// committed returns the group's committed offsets of topic, by partition.
func committed(t testing.TB, brokers []string, group, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	out := make(map[int32]int64)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return out // the group has not committed anything yet
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range resp.Offsets()[topic] {
		out[o.Partition] = o.At
	}
	return out
}

// endOffsets returns the end offset of every partition of topic.
func endOffsets(t testing.TB, brokers []string, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// running is a consumer running in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start(t testing.TB, c *Consumer) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the consumer and waits for Run to return; it may be called more than once.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(testTimeout):
		t.Fatalf("consumer did not stop")
		return nil
	}
}

// fastGroup are client options that make group changes quick on a test broker.
func fastGroup() Option {
	return WithClientOptions(
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.SessionTimeout(6*time.Second),
		kgo.AutoCommitInterval(200*time.Millisecond),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
}

// waitFor polls cond until it holds, failing the test after testTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, testTimeout, what, cond)
}

func count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// recorder collects what a plain handler saw, by key, in order.
type recorder struct {
	mu    sync.Mutex
	byKey map[string][]int
	n     int
}

func (r *recorder) add(key string, seq int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey == nil {
		r.byKey = make(map[string][]int)
	}
	r.byKey[key] = append(r.byKey[key], seq)
	r.n++
}

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func decodeSeq(t testing.TB, rec *kgo.Record) (string, int) {
	var p seqPayload
	if err := json.Unmarshal(rec.Value, &p); err != nil {
		t.Errorf("decode %s: %v", rec.Value, err)
	}
	return string(rec.Key), p.Seq
}

// newLocker is lock.New that fails the test on an error.
func newLocker(t testing.TB, client redis.UniversalClient, opts ...lock.Option) *lock.Locker {
	t.Helper()
	l, err := lock.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// idempotent is Idempotent that fails the test on an error.
func idempotent(t testing.TB, cfg IdempotentConfig, h TxHandler) Handler {
	t.Helper()
	ih, err := Idempotent(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	return ih
}

// migratedOutbox returns an Outbox of the default table, its tables migrated on pool.
func migratedOutbox(t testing.TB, pool *pgxpool.Pool) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return ob
}
