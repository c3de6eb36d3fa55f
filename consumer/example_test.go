package consumer_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/tracing"
)

// A payment service charges every order.created event once, records the payment and
// publishes payment.authorized through the outbox, in one transaction. embedConsumer is
// the embedding; the rest starts throw-away infrastructure and feeds it.
func ExampleStandard() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, rdb, brokers, cleanup := exampleInfra(ctx)
	defer cleanup()
	done := make(chan error, 1)
	go func() { done <- embedConsumer(ctx, pool, rdb, brokers) }()

	// The same order.created delivered twice, an event nobody handles, then another order.
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	var recs []*kgo.Record
	for _, e := range []struct{ typ, order string }{{"order.created", "o-1"}, {"order.viewed", "o-1"}, {"order.created", "o-2"}} {
		ev, _ := event.New("order", e.typ, e.order, map[string]int{"amount": 42})
		rec, _ := event.ToRecord("orders.events", ev)
		recs = append(recs, rec)
	}
	if err := producer.ProduceSync(ctx, recs[0], recs[0], recs[1], recs[2]).FirstErr(); err != nil {
		panic(err)
	}

	var payments, queued int
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && payments < 2; time.Sleep(50 * time.Millisecond) {
		_ = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM payments), (SELECT count(*) FROM choreo_outbox)`).Scan(&payments, &queued)
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	fmt.Printf("payments: %d, events queued in the outbox: %d\n", payments, queued)
	// Output: payments: 2, events queued in the outbox: 2
}

// embedConsumer is the embedding README.md shows: a payment service's consumer on pool,
// rdb and the Kafka cluster at brokers, until ctx ends.
func embedConsumer(ctx context.Context, pool *pgxpool.Pool, rdb *redis.Client, brokers []string) error {
	// snippet:start readme-consumer
	// Spans, metrics and W3C propagation from the OTEL_* variables (no endpoint: nothing
	// is exported). Without it the upstream trace context still flows through.
	tel, err := tracing.Setup(ctx, "payment")
	if err != nil {
		return err
	}
	defer tel.Shutdown(context.WithoutCancel(ctx))
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...)) // publishes dead letters
	if err != nil {
		return err
	}
	defer producer.Close()
	ob, err := outbox.New()
	if err != nil {
		return err
	}
	router := consumer.NewRouter().
		Handle("order.created", func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			var order struct {
				Amount int `json:"amount"`
			}
			if err := ev.DecodeData(&order); err != nil {
				return err // malformed: dead-lettered at once
			}
			if _, err := tx.Exec(ctx, `INSERT INTO payments (order_id, amount) VALUES ($1, $2)`, ev.Subject, order.Amount); err != nil {
				return err // retried with backoff and full jitter, then dead-lettered
			}
			next, err := event.New("payment", "payment.authorized", ev.Subject, order)
			if err != nil {
				return err
			}
			return ob.Enqueue(ctx, tx, "payments.events", next.CausedBy(ev)) // same transaction
		})
	locker, err := lock.New(rdb) // per-entity leases
	if err != nil {
		return err
	}
	h, err := consumer.Standard(consumer.StandardConfig{
		DB: pool, Router: router, DeadLetter: producer, Name: "charge",
		Locker: locker, AfterCommit: []func(){ob.Wake}, EntityAttribute: "order.id",
	})
	if err != nil {
		return err
	}
	c, err := consumer.New(brokers, "payment", []string{"orders.events"}, h)
	if err != nil {
		return err
	}
	err = c.Run(ctx) // graceful: finishes in-flight events and commits on cancel
	// Leases are released in the background; let the last releases reach Redis.
	return errors.Join(err, locker.Wait(context.WithoutCancel(ctx)))
	// snippet:end readme-consumer
}

// Permanent marks an error that no retry can fix: Retry gives up at once and DeadLetter
// sends the event to the dead-letter topic with reason "permanent".
func ExamplePermanent() {
	errLimit := errors.New("amount above the customer's limit")
	err := fmt.Errorf("charge o-1: %w", consumer.Permanent(errLimit))
	fmt.Println(consumer.Retryable(err), errors.Is(err, errLimit), consumer.Reason(err))
	fmt.Println(consumer.Retryable(lock.ErrNotObtained), consumer.Reason(idempotency.ErrKeyReused))
	// Output:
	// false true permanent
	// true key_reused
}

// IsOutage tells a failure of the infrastructure (retried without limit, never
// dead-lettered) from a failure of the record (retried within the Retry budget, then
// dead-lettered).
func ExampleIsOutage() {
	deadlock := &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}
	fmt.Println(consumer.IsOutage(fmt.Errorf("charge o-1: %w", deadlock)))
	fmt.Println(consumer.IsOutage(fmt.Errorf("lock o-1: %w", io.EOF)))
	fmt.Println(consumer.IsOutage(fmt.Errorf("charge o-1: %w", consumer.ErrOutage)))
	fmt.Println(consumer.IsOutage(errors.New("amount above the customer's limit")))
	fmt.Println(consumer.IsOutage(kerr.MessageTooLarge))
	// Output:
	// true
	// true
	// true
	// false
	// false
}

func exampleID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// exampleInfra returns a Postgres pool on a private schema holding the idempotency, fence
// and outbox tables and a payments table, a Redis client, and an in-process Kafka
// (kfake) broker with the topics of the example.
func exampleInfra(ctx context.Context) (*pgxpool.Pool, *redis.Client, []string, func()) {
	dsn := os.Getenv("CHOREO_TEST_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	schema := "choreo_example_" + exampleID()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		panic(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE payments (order_id text PRIMARY KEY, amount int NOT NULL)"); err != nil {
		panic(err)
	}
	if err := migrate.Up(ctx, pool); err != nil {
		panic(err)
	}
	addr := os.Getenv("CHOREO_TEST_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders.events", "orders.events.dlq", "payments.events"))
	if err != nil {
		panic(err)
	}
	return pool, rdb, cluster.ListenAddrs(), func() {
		cluster.Close()
		_ = rdb.Close()
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		pool.Close()
	}
}

// A Decoder for a producer that writes plain JSON instead of CloudEvents: the type comes
// from the "event-type" header or the payload's "type" field, the id from the
// "message-id" header or else the record's position (topic/partition/offset, the same on
// every redelivery, so the idempotency record still absorbs them; a re-produced copy is a
// new event). Set it as StandardConfig.Decoder; its errors are dead-lettered as malformed.
func ExampleDecoder() {
	plainJSON := func(r *kgo.Record) (event.Event, error) {
		header := func(key string) string {
			for _, h := range r.Headers {
				if h.Key == key {
					return string(h.Value)
				}
			}
			return ""
		}
		var body struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(r.Value, &body); err != nil {
			return event.Event{}, fmt.Errorf("plain JSON: %w", err)
		}
		ev := event.Event{
			ID: header("message-id"), Type: header("event-type"), Source: r.Topic,
			Subject: string(r.Key), Time: r.Timestamp, SchemaVersion: 1, Data: r.Value,
		}
		if ev.Type == "" {
			ev.Type = body.Type
		}
		if ev.ID == "" {
			ev.ID = fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
		}
		ev.CorrelationID = ev.ID
		return ev, nil // Standard checks it with Event.Validate
	}
	cfg := consumer.StandardConfig{Decoder: plainJSON /* DB, Router, DeadLetter, ... */}

	ev, err := cfg.Decoder(&kgo.Record{Topic: "legacy.orders", Partition: 2, Offset: 41,
		Key: []byte("o-7"), Value: []byte(`{"type":"order.placed","amount":5}`)})
	fmt.Println(ev.Type, ev.ID, ev.Subject, err)
	// Output: order.placed legacy.orders/2/41 o-7 <nil>
}

// A handler credits an account with a write that rides the transaction's COMMIT: no round
// trip of its own. A redelivery of the same event is a duplicate, so the account is
// credited once.
func ExampleAtCommit() {
	ctx := context.Background()
	pool, _, _, cleanup := exampleInfra(ctx)
	defer cleanup()
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0));
INSERT INTO accounts VALUES ('acc-1', 0)`); err != nil {
		panic(err)
	}

	h, err := consumer.Idempotent(consumer.IdempotentConfig{DB: pool, Name: "credit"},
		func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			var in struct {
				Amount int64 `json:"amount"`
			}
			if err := ev.DecodeData(&in); err != nil {
				return err
			}
			return consumer.AtCommit(ctx, tx, func(b *pgx.Batch) {
				b.Queue(`UPDATE accounts SET balance = balance + $2 WHERE id = $1`, ev.Subject, in.Amount)
			})
		})
	if err != nil {
		panic(err)
	}
	ev, _ := event.New("bank", "deposit.made", "acc-1", map[string]int64{"amount": 25})
	for range 2 { // delivered twice
		if err := h(ctx, &consumer.Message{Group: "bank", Event: ev, Decoded: true}); err != nil {
			panic(err)
		}
	}
	var balance int64
	if err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 'acc-1'`).Scan(&balance); err != nil {
		panic(err)
	}
	fmt.Println("balance:", balance)
	// Output: balance: 25
}
