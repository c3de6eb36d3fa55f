package outbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
)

// exampleDSN is the Postgres the runnable examples use.
func exampleDSN() string {
	if dsn := os.Getenv("CHOREO_TEST_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/postgres"
}

// Example stores an event with the business write in one transaction, relays
// it to a Kafka-protocol broker, and reads it back.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleDSN())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders.events"))
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()

	// A schema of its own keeps the example's tables apart.
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	schema := "outbox_example_" + hex.EncodeToString(b)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".orders (id text PRIMARY KEY, total int)"); err != nil {
		log.Fatal(err)
	}
	defer pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE") //nolint:errcheck

	ob, err := outbox.New(outbox.WithTable(schema + ".outbox"))
	if err != nil {
		log.Fatal(err)
	}
	if err := migrate.Up(ctx, pool, migrate.WithOutboxTable(ob.TableName())); err != nil {
		log.Fatal(err)
	}

	// The relay: one per service instance; they elect a leader among themselves.
	producer, err := kgo.NewClient(kgo.SeedBrokers(broker.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	relay, err := outbox.NewRelay(pool, producer, ob, outbox.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- relay.Run(runCtx) }()

	// The writer: the entity row first, then its event, in one transaction.
	// InTx wakes the relay after COMMIT.
	ev, err := event.New("order", "order.created", "order-1", map[string]int{"total": 42})
	if err != nil {
		log.Fatal(err)
	}
	err = ob.InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".orders VALUES ($1, $2)", "order-1", 42); err != nil {
			return err
		}
		return ob.Enqueue(ctx, tx, "orders.events", ev)
	})
	if err != nil {
		log.Fatal(err)
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(broker.ListenAddrs()...),
		kgo.ConsumeTopics("orders.events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	pollCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rec := consumer.PollRecords(pollCtx, 1).Records()[0]
	got, err := event.FromRecord(rec)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(rec.Key), got.Type, got.ID == ev.ID, string(got.Data))

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output: order-1 order.created true {"total":42}
}

// ExampleNewRelay shows a relay configured for production: its own producer
// (idempotent, acks=all, no lingering), the service's telemetry, and the
// entity attribute that makes the relay's spans searchable by order id.
func ExampleNewRelay() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	producer, err := kgo.NewClient(
		kgo.SeedBrokers("kafka:9092"),
		kgo.ProducerLinger(0),                // the relay waits for every batch anyway
		kgo.ProducerBatchMaxBytes(1_000_000), // <= the topics' max.message.bytes
	)
	if err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.New()
	if err != nil {
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(pool, producer, ob, // Wake from this process reaches the relay in memory
		outbox.WithEntityAttribute("order.id"),
		outbox.WithPollInterval(500*time.Millisecond),
		outbox.WithShutdownTimeout(5*time.Second),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil { // returns nil on cancellation
		log.Fatal(err)
	}
}

// ExampleOutbox_Wake shows a writer in a process without a relay: Wake sends
// a NOTIFY after the commit, never inside the transaction.
func ExampleOutbox_Wake() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.New(outbox.WithNotifier(pool))
	if err != nil {
		log.Fatal(err)
	}
	ev, err := event.New("payment", "payment.authorized", "order-1", map[string]string{"charge": "ch-1"})
	if err != nil {
		log.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if err := ob.Enqueue(ctx, tx, "payments.events", ev); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	ob.Wake()
}
