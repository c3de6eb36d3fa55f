package idempotency_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/migrate"
)

// exampleDB connects to the test Postgres (CHOREO_TEST_POSTGRES_DSN, else
// 127.0.0.1:5432) with a private, throw-away schema as search_path.
func exampleDB(ctx context.Context) (pool *pgxpool.Pool, cleanup func()) {
	dsn := os.Getenv("CHOREO_TEST_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "choreo_example_" + hex.EncodeToString(b)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		panic(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema+`;
		CREATE TABLE charges (order_id text PRIMARY KEY, amount int NOT NULL)`); err != nil {
		panic(err)
	}
	return pool, func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		pool.Close()
	}
}

// A consumer handler claims the event's id in its own transaction before
// its business writes. The redelivered event is skipped.
func ExampleStore_Claim() {
	ctx := context.Background()
	pool, cleanup := exampleDB(ctx)
	defer cleanup()
	if err := migrate.Up(ctx, pool); err != nil {
		panic(err)
	}
	store, err := idempotency.NewStore()
	if err != nil {
		panic(err)
	}

	handle := func(eventID, orderID string, payload []byte) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			c, err := store.Claim(ctx, tx, "payment", eventID, idempotency.Hash(payload))
			if err != nil {
				return err // ErrKeyReused is permanent: dead-letter the event
			}
			if c.Duplicate {
				fmt.Println("duplicate", eventID, "skipped")
				return nil
			}
			_, err = tx.Exec(ctx, `INSERT INTO charges VALUES ($1, 42)`, orderID)
			fmt.Println("charged", orderID)
			return err
		})
	}

	payload := []byte(`{"order":"o-1","amount":42}`)
	_ = handle("ev-1", "o-1", payload)
	_ = handle("ev-1", "o-1", payload) // Kafka redelivers
	err = handle("ev-1", "o-1", []byte(`{"order":"o-1","amount":99}`))
	fmt.Println(errors.Is(err, idempotency.ErrKeyReused))
	// Output:
	// charged o-1
	// duplicate ev-1 skipped
	// true
}

// An HTTP handler with an Idempotency-Key header: the retried request gets
// the stored response instead of a second charge.
func ExampleStore_Do() {
	ctx := context.Background()
	pool, cleanup := exampleDB(ctx)
	defer cleanup()
	if err := migrate.Up(ctx, pool); err != nil {
		panic(err)
	}
	store, err := idempotency.NewStore()
	if err != nil {
		panic(err)
	}

	body := []byte(`{"order":"o-7","amount":10}`)
	for range 2 {
		resp, duplicate, err := store.Do(ctx, pool, "POST /charges", "key-from-header", idempotency.Hash(body),
			func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				if _, err := tx.Exec(ctx, `INSERT INTO charges VALUES ('o-7', 10)`); err != nil {
					return nil, err
				}
				return []byte(`{"charge":"o-7","status":"created"}`), nil
			})
		fmt.Println(string(resp), duplicate, err)
	}
	// Output:
	// {"charge":"o-7","status":"created"} false <nil>
	// {"charge":"o-7","status":"created"} true <nil>
}

// A create whose response (the new id) is known before the work: the claim
// leads the work in one round trip (QueueNewClaim, in the batch's implicit
// transaction); a key that already has a record writes nothing and falls back
// to ClaimWithResponse in a transaction, which returns the first response.
func ExampleStore_QueueNewClaim() {
	ctx := context.Background()
	pool, cleanup := exampleDB(ctx)
	defer cleanup()
	if err := migrate.Up(ctx, pool); err != nil {
		panic(err)
	}
	store, err := idempotency.NewStore()
	if err != nil {
		panic(err)
	}

	create := func(key, newID string, body []byte) (id string, created bool, err error) {
		hash := idempotency.Hash(body)
		b := &pgx.Batch{}
		if err := store.QueueNewClaim(b, "POST /charges", key, hash, []byte(newID)); err != nil {
			return "", false, err
		}
		b.Queue(`INSERT INTO charges VALUES ($1, 10)`, newID)
		err = pool.SendBatch(ctx, b).Close()
		if !errors.Is(err, idempotency.ErrKeyExists) {
			return newID, err == nil, err
		}
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			c, err := store.ClaimWithResponse(ctx, tx, "POST /charges", key, hash, []byte(newID))
			if err != nil || c.Duplicate {
				id = string(c.Response)
				return err
			}
			id, created = newID, true // an expired record was taken over
			_, err = tx.Exec(ctx, `INSERT INTO charges VALUES ($1, 10)`, newID)
			return err
		})
		return id, created, err
	}

	body := []byte(`{"amount":10}`)
	fmt.Println(create("key-1", "ch-1", body))
	fmt.Println(create("key-1", "ch-2", body)) // the client retries
	_, _, err = create("key-1", "ch-3", []byte(`{"amount":11}`))
	fmt.Println(errors.Is(err, idempotency.ErrKeyReused))
	// Output:
	// ch-1 true <nil>
	// ch-1 false <nil>
	// true
}

// Each service runs a Sweeper next to its consumers.
func ExampleSweeper() {
	ctx := context.Background()
	pool, cleanup := exampleDB(ctx)
	defer cleanup()
	if err := migrate.Up(ctx, pool); err != nil {
		panic(err)
	}
	_, _ = pool.Exec(ctx, `INSERT INTO choreo_idempotency (scope, key, request_hash, expires_at)
		SELECT 'payment', 'ev-' || i, '', now() - interval '1 day' FROM generate_series(1, 2500) AS i`)

	sweeper, err := idempotency.NewSweeper(pool, idempotency.WithBatchSize(1000))
	if err != nil {
		panic(err)
	}
	n, err := sweeper.SweepOnce(ctx) // in a service: go sweeper.Run(ctx)
	fmt.Println(n, err)
	// Output:
	// 2500 <nil>
}
