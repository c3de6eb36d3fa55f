package outbox_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
)

// readStarts records the id each of the relay's reads starts after (a pgx tracer on the
// pool, which the relay's sessions copy).
type readStarts struct {
	mu    sync.Mutex
	after []int64
}

func (r *readStarts) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *readStarts) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if !strings.HasPrefix(d.SQL, "SELECT id, topic") || len(d.Args) < 2 {
		return
	}
	r.mu.Lock()
	r.after = append(r.after, d.Args[1].(int64))
	r.mu.Unlock()
}

func (r *readStarts) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (r *readStarts) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (r *readStarts) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *readStarts) all() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.after...)
}

// holdSnapshot opens a REPEATABLE READ transaction that has taken its snapshot and keeps
// it until the test ends: vacuum cannot remove what is deleted after it.
func holdSnapshot(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
}

func (r *readStarts) last() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.after) == 0 {
		return -1
	}
	return r.after[len(r.after)-1]
}

// startsRecorded returns a pool on a fresh migrated database whose sessions (the relay's
// too) record where each relay read starts.
func startsRecorded(t *testing.T) (*pgxpool.Pool, *readStarts) {
	t.Helper()
	starts := &readStarts{}
	return migrated(t, testenv.PostgresWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = starts })), starts
}

// TestReadsStartPastPublishedRows: while a snapshot holds back vacuum, the relay's reads
// start past the rows it has published (whose deleted index entries stay) once its floor
// has moved, not at the table's first row; every row is published once.
func TestReadsStartPastPublishedRows(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 2)
	pool, starts := startsRecorded(t)
	holdSnapshot(t, pool)
	ob := newOutbox(t)
	r := start(t, pool, producer(t, brokers), ob, outbox.WithFloorInterval(10*time.Millisecond), outbox.WithPollInterval(20*time.Millisecond))
	testenv.Eventually(t, deadline, "the relay to lead", r.relay.Leader)
	want := map[string]int{}
	for i := range 20 {
		want["k"]++
		enqueue(t, pool, ob, topic, newEvent(t, "k", i+1))
		testenv.Eventually(t, deadline, "the row to be published", func() bool { return count(t, pool, "choreo_outbox") == 0 })
	}
	checkDelivery(t, readAll(t, brokers, topic), want)
	testenv.Eventually(t, deadline, "reads to start past the 20 published rows", func() bool { return starts.last() >= 20 })
	after := starts.all()
	for i, a := range after[1:] {
		if a < after[i] {
			t.Fatalf("read %d starts after id %d, behind the read before it (%d): %v", i+2, a, after[i], after)
		}
	}
}

// TestFloorWaitsForWriters: a transaction that has drawn an id and not committed keeps the
// floor below it while rows with higher ids are published; once it commits, its row is
// published, before the next row of its key, and the floor passes it.
func TestFloorWaitsForWriters(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 2)
	pool, starts := startsRecorded(t)
	ob := newOutbox(t)
	ctx := context.Background()

	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Rollback(ctx) }()
	if err := ob.Enqueue(ctx, late, topic, newEvent(t, "k", 1)); err != nil { // draws id 1
		t.Fatal(err)
	}
	r := start(t, pool, producer(t, brokers), ob, outbox.WithFloorInterval(10*time.Millisecond), outbox.WithPollInterval(20*time.Millisecond))
	testenv.Eventually(t, deadline, "the relay to lead", r.relay.Leader)
	enqueue(t, pool, ob, topic, newEvent(t, "other", 1)) // id 2, published at once
	testenv.Eventually(t, deadline, "the higher id to be published", func() bool { return count(t, pool, "choreo_outbox") == 0 })
	seen := len(starts.all())
	testenv.Eventually(t, deadline, "ten more reads", func() bool { return len(starts.all()) >= seen+10 })
	for i, a := range starts.all() {
		if a != 0 {
			t.Fatalf("read %d starts after id %d while the transaction holding id 1 is open", i+1, a)
		}
	}

	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue(t, pool, ob, topic, newEvent(t, "k", 2)) // id 3, the next of key k
	testenv.Eventually(t, deadline, "the outbox to drain", func() bool { return count(t, pool, "choreo_outbox") == 0 })
	got := readAll(t, brokers, topic)
	checkDelivery(t, got, map[string]int{"k": 2, "other": 1})
	testenv.Eventually(t, deadline, "reads to start past the late row", func() bool { return starts.last() >= 3 })
}

// TestFloorOff: with a floor interval of 0 every read starts at the table's first row.
func TestFloorOff(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 2)
	pool, starts := startsRecorded(t)
	ob := newOutbox(t)
	r := start(t, pool, producer(t, brokers), ob, outbox.WithFloorInterval(0), outbox.WithPollInterval(20*time.Millisecond))
	testenv.Eventually(t, deadline, "the relay to lead", r.relay.Leader)
	for i := range 5 {
		enqueue(t, pool, ob, topic, newEvent(t, "k", i+1))
		testenv.Eventually(t, deadline, "the row to be published", func() bool { return count(t, pool, "choreo_outbox") == 0 })
	}
	seen := len(starts.all())
	testenv.Eventually(t, deadline, "ten more reads", func() bool { return len(starts.all()) >= seen+10 })
	for i, a := range starts.all() {
		if a != 0 {
			t.Fatalf("read %d starts after id %d with the floor off", i+1, a)
		}
	}
}

// TestFloorWithoutSequencePrivilege: a relay whose role may use the outbox table but not
// read its id sequence publishes everything, every read starting at the first row.
func TestFloorWithoutSequencePrivilege(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 2)
	admin := db(t)
	ctx := context.Background()
	// Roles are the server's, not a database's: the pid keeps a concurrent run's apart.
	role := fmt.Sprintf("outbox_relay_%s_%d", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_")), os.Getpid())
	for _, q := range []string{
		"DROP ROLE IF EXISTS " + role,
		"CREATE ROLE " + role,
		"GRANT SELECT, INSERT, DELETE ON choreo_outbox, choreo_outbox_dead TO " + role,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(ctx, "DROP OWNED BY "+role)
		_, _ = admin.Exec(ctx, "DROP ROLE IF EXISTS "+role)
	})
	starts := &readStarts{}
	limited := testenv.PostgresWith(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Database = admin.Config().ConnConfig.Database
		cfg.ConnConfig.RuntimeParams["role"] = role
		cfg.ConnConfig.Tracer = starts
	})
	var canRead bool
	if err := limited.QueryRow(ctx, "SELECT has_sequence_privilege(pg_get_serial_sequence('choreo_outbox', 'id'), 'SELECT')").Scan(&canRead); err != nil {
		t.Fatal(err)
	}
	if canRead {
		t.Fatal("the limited role can read the sequence; the test needs one that cannot")
	}
	ob := newOutbox(t)
	r := start(t, limited, producer(t, brokers), ob, outbox.WithFloorInterval(10*time.Millisecond), outbox.WithPollInterval(20*time.Millisecond))
	testenv.Eventually(t, deadline, "the relay to lead", r.relay.Leader)
	for i := range 5 {
		enqueue(t, limited, ob, topic, newEvent(t, "k", i+1))
		testenv.Eventually(t, deadline, "the row to be published", func() bool { return count(t, admin, "choreo_outbox") == 0 })
	}
	checkDelivery(t, readAll(t, brokers, topic), map[string]int{"k": 5})
	for i, a := range starts.all() {
		if a != 0 {
			t.Fatalf("read %d starts after id %d though the sequence cannot be read", i+1, a)
		}
	}
}
