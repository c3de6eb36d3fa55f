package consumer

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// realErrors produces the failures IsOutage must classify, each by provoking it on a real
// Postgres, Redis or Kafka-protocol broker. It returns them by name.
func realErrors(t *testing.T) (outages, others map[string]error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	outages, others = map[string]error{}, map[string]error{}
	must := func(name string, err error) error {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error provoked", name)
		}
		return err
	}

	// --- Postgres ---
	dsn := testenv.PostgresDSN(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL); INSERT INTO t VALUES (1, 0), (2, 0)`); err != nil {
		t.Fatal(err)
	}
	down := closedAddr(t)
	host, port, _ := net.SplitHostPort(down)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host, cfg.Port, cfg.ConnectTimeout = host, parsePort(t, port), 2*time.Second
	_, err = pgx.ConnectConfig(ctx, cfg)
	outages["postgres connect refused"] = must("connect", err)

	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.Host, pcfg.ConnConfig.Port = host, parsePort(t, port)
	downPool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = downPool.Exec(ctx, `SELECT 1`)
	outages["postgres pool exec, server down"] = must("pool down", err)
	downPool.Close()

	// The server answers the connection with a FATAL error (3D000): a *pgconn.ConnectError
	// wrapping a *pgconn.PgError whose SQLSTATE alone would not be an outage.
	missingDB, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	missingDB.Database = "choreo_no_such_database"
	_, err = pgx.ConnectConfig(ctx, missingDB)
	outages["postgres connect, FATAL from the server"] = must("connect to a missing database", err)
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "3D000" {
		t.Fatalf("connect to a missing database: %v, want SQLSTATE 3D000", err)
	}

	small, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	small.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, small)
	if err != nil {
		t.Fatal(err)
	}
	held, err := one.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = one.Acquire(actx)
	acancel()
	outages["postgres pool acquire timeout"] = must("acquire timeout", err)
	held.Release()
	one.Close()

	_, err = pool.Exec(ctx, `SELECT * FROM missing_table`)
	outages["42P01 undefined table"] = must("undefined table", err)
	_, err = pool.Exec(ctx, `SELECT missing_column FROM t`)
	outages["42703 undefined column"] = must("undefined column", err)
	outages["40P01 deadlock"] = deadlock(t, ctx, pool)
	outages["40001 serialization failure"] = serializationFailure(t, ctx, pool)

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, conn.PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `SELECT 1`)
	outages["postgres backend terminated"] = must("terminated", err)
	conn.Close(ctx)
	_, err = conn.Exec(ctx, `SELECT 1`)
	outages["postgres conn closed"] = must("closed conn", err)

	_, err = pool.Exec(ctx, `INSERT INTO t VALUES (1, 0)`)
	others["23505 unique violation"] = must("unique violation", err)
	_, err = pool.Exec(ctx, `SELECT 1/0`)
	others["22012 division by zero"] = must("division by zero", err)

	// A lease's fence checked in a database without the fence table: a deployment error,
	// wrapped by lock.Lease.CheckFence.
	rdb, ns := testenv.Redis(t)
	locker := newLocker(t, rdb, lock.WithNamespace(ns), lock.WithMaxWait(50*time.Millisecond), lock.WithRetryBackoff(time.Millisecond, 5*time.Millisecond))
	lease, err := locker.Acquire(ctx, "e1")
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return lease.CheckFence(ctx, tx) })
	outages["lock CheckFence without its table (42P01)"] = must("check fence", err)

	// --- Redis ---
	_, err = locker.Acquire(ctx, "e1")
	others["lock not obtained (held)"] = must("held", err)
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	downRedis := redis.NewClient(&redis.Options{Addr: down, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { downRedis.Close() })
	outages["redis ping refused"] = must("redis down", downRedis.Ping(ctx).Err())
	downLocker := newLocker(t, downRedis, lock.WithNamespace(ns))
	_, err = downLocker.Acquire(ctx, "e2")
	outages["lock Acquire, redis down"] = must("acquire down", err)
	_, err = downLocker.AcquireAll(ctx, []string{"e2", "e3"})
	outages["lock AcquireAll, redis down"] = must("acquire all down", err)

	closed := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	closed.Close()
	outages["redis client closed"] = must("closed", closed.Ping(ctx).Err())

	busy := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), PoolSize: 1, PoolTimeout: 20 * time.Millisecond})
	t.Cleanup(func() { busy.Close() })
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		busy.BLPop(ctx, time.Second, ns+"never") // holds the only connection
	}()
	time.Sleep(100 * time.Millisecond)
	outages["redis pool timeout"] = must("pool timeout", busy.Ping(ctx).Err())
	<-blocked

	// --- Kafka: what a dead-letter produce meets ---
	cluster := testenv.KafkaCluster(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "2048"}))
	brokers := cluster.ListenAddrs()
	topic := testenv.Topic(t, brokers, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordDeliveryTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	big := make([]byte, 8192)
	_, _ = rand.Read(big) // incompressible
	err = cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: big}).FirstErr()
	others["MESSAGE_TOO_LARGE"] = fmt.Errorf("%w: to dlq: %w (handling error: %w)", ErrDeadLetter, must("too large", err), errors.New("boom"))
	err = cl.ProduceSync(ctx, &kgo.Record{Topic: "no-such-topic-" + ns[:len(ns)-1], Value: []byte("x")}).FirstErr()
	others["UNKNOWN_TOPIC_OR_PARTITION"] = fmt.Errorf("%w: to dlq: %w (handling error: %w)", ErrDeadLetter, must("unknown topic", err), errors.New("boom"))

	gone := testenv.KafkaCluster(t)
	goneAddrs := gone.ListenAddrs()
	gone.Close()
	dl, err := kgo.NewClient(kgo.SeedBrokers(goneAddrs...), kgo.RecordDeliveryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dl.Close)
	err = dl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr()
	outages["dead-letter produce, broker down"] = fmt.Errorf("%w: to dlq: %w (handling error: %w)", ErrDeadLetter, must("broker down", err), errors.New("boom"))

	// --- the record's own failures ---
	others["plain error"] = errors.New("amount above the customer's limit")
	others["permanent"] = Permanent(errors.New("validation failed"))
	others["malformed"] = fmt.Errorf("decode: %w", event.ErrMalformed)
	others["key reused"] = fmt.Errorf("claim: %w", idempotency.ErrKeyReused)
	others["panic"] = &panicError{value: "boom"}
	others["context cancelled"] = fmt.Errorf("query: %w", context.Canceled)
	outages["ErrOutage declared by a handler"] = fmt.Errorf("call the bank: %w", ErrOutage)
	return outages, others
}

func parsePort(t *testing.T, s string) uint16 {
	t.Helper()
	var p uint16
	if _, err := fmt.Sscan(s, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// deadlock makes two transactions lock rows 1 and 2 in opposite orders and returns the
// error of the one Postgres picks as the victim.
func deadlock(t *testing.T, ctx context.Context, pool *pgxpool.Pool) error {
	t.Helper()
	tx1, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(ctx)
	tx2, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(ctx)
	if _, err := tx1.Exec(ctx, `UPDATE t SET v = v + 1 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx2.Exec(ctx, `UPDATE t SET v = v + 1 WHERE id = 2`); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() {
		_, err := tx1.Exec(ctx, `UPDATE t SET v = v + 1 WHERE id = 2`)
		if err != nil {
			tx1.Rollback(ctx)
		}
		errs <- err
	}()
	go func() {
		_, err := tx2.Exec(ctx, `UPDATE t SET v = v + 1 WHERE id = 1`)
		if err != nil {
			tx2.Rollback(ctx)
		}
		errs <- err
	}()
	e1, e2 := <-errs, <-errs
	if err := errors.Join(e1, e2); err != nil {
		return err
	}
	t.Fatal("no deadlock detected")
	return nil
}

// serializationFailure makes a REPEATABLE READ transaction update a row that another
// transaction changed after its snapshot.
func serializationFailure(t *testing.T, ctx context.Context, pool *pgxpool.Pool) error {
	t.Helper()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var v int
	if err := tx.QueryRow(ctx, `SELECT v FROM t WHERE id = 1`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE t SET v = v + 1 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, `UPDATE t SET v = v + 1 WHERE id = 1`)
	if err == nil {
		t.Fatal("no serialization failure")
	}
	return err
}

// IsOutage tells failures of the infrastructure from failures of the record, on errors
// provoked on real servers.
func TestIsOutage(t *testing.T) {
	outages, others := realErrors(t)
	for name, err := range outages {
		t.Logf("outage %s: %v", name, err)
		if !IsOutage(err) {
			t.Errorf("%s: IsOutage(%v) = false, want true", name, err)
		}
		if IsOutage(fmt.Errorf("consumer: lock %q: %w", "k", err)) != true {
			t.Errorf("%s: not an outage once wrapped", name)
		}
	}
	for name, err := range others {
		t.Logf("not an outage %s: %v", name, err)
		if IsOutage(err) {
			t.Errorf("%s: IsOutage(%v) = true, want false", name, err)
		}
	}
	if IsOutage(nil) {
		t.Error("IsOutage(nil) = true")
	}
	for _, code := range []string{"08006", "08001", "57P01", "57P02", "57P03", "53300"} {
		if !IsOutage(&pgconn.PgError{Code: code}) {
			t.Errorf("SQLSTATE %s: not an outage", code)
		}
	}
	if want := []string{"missing_table", "deadlock", "serialize"}; !strings.Contains(outages["42P01 undefined table"].Error(), want[0]) ||
		!strings.Contains(outages["40P01 deadlock"].Error(), want[1]) || !strings.Contains(outages["40001 serialization failure"].Error(), want[2]) {
		t.Errorf("the provoked errors are not the ones intended: %v / %v / %v",
			outages["42P01 undefined table"], outages["40P01 deadlock"], outages["40001 serialization failure"])
	}
	if !errors.Is(others["MESSAGE_TOO_LARGE"], kerr.MessageTooLarge) || !errors.Is(others["UNKNOWN_TOPIC_OR_PARTITION"], kerr.UnknownTopicOrPartition) {
		t.Errorf("the broker refusals are not the ones intended: %v / %v", others["MESSAGE_TOO_LARGE"], others["UNKNOWN_TOPIC_OR_PARTITION"])
	}
}

// DeadLetter returns an outage unchanged and produces nothing; Retry returns it at once
// without spending its budget, and keeps dead-lettering what is not an outage.
func TestOutageNeverDeadLettered(t *testing.T) {
	brokers := testenv.Kafka(t)
	dlq := testenv.Topic(t, brokers, 1)
	producer := newProducer(t, brokers)
	outage := fmt.Errorf("claim: %w", &pgconn.PgError{Code: "57P01", Message: "terminating connection"})
	var calls int
	h := wrap(func(context.Context, *Message) error {
		calls++
		return outage
	}, DeadLetter(producer), retryInPlace(RetryConfig{MaxAttempts: 3}))
	m := &Message{Record: &kgo.Record{Topic: "src", Value: []byte("v")}, Group: "g", deadLetterTopic: func(string) string { return dlq }}
	if err := h(context.Background(), m); err != outage {
		t.Fatalf("chain returned %v, want the outage unchanged", err)
	}
	if calls != 1 || m.Attempt != 1 || m.Outcome != "" {
		t.Errorf("calls %d, attempt %d, outcome %q; want 1, 1 and none", calls, m.Attempt, m.Outcome)
	}
	if n := endOffsets(t, brokers, dlq)[0]; n != 0 {
		t.Errorf("%d records dead-lettered, want 0", n)
	}
	// The same chain still dead-letters a record's own failure.
	h = wrap(func(context.Context, *Message) error { return Permanent(errors.New("bad amount")) },
		DeadLetter(producer), retryInPlace(RetryConfig{MaxAttempts: 3}))
	if err := h(context.Background(), &Message{Record: &kgo.Record{Topic: "src", Value: []byte("v")}, Group: "g", deadLetterTopic: func(string) string { return dlq }}); err != nil {
		t.Fatalf("permanent failure: %v, want dead-lettered", err)
	}
	if n := endOffsets(t, brokers, dlq)[0]; n != 1 {
		t.Errorf("%d records dead-lettered, want 1", n)
	}
}
