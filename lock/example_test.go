package lock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
)

func exampleID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// exampleRedis connects to the test Redis (CHOREO_TEST_REDIS_ADDR, else
// 127.0.0.1:6379) and returns a throw-away key namespace.
func exampleRedis() (client *redis.Client, namespace string, cleanup func()) {
	addr := os.Getenv("CHOREO_TEST_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	client = redis.NewClient(&redis.Options{Addr: addr})
	namespace = "choreo_example_" + exampleID() + ":"
	return client, namespace, func() {
		ctx := context.Background()
		keys, _ := client.Keys(ctx, namespace+"*").Result()
		if len(keys) > 0 {
			client.Del(ctx, keys...)
		}
		client.Close()
	}
}

// examplePostgres connects to the test Postgres (CHOREO_TEST_POSTGRES_DSN,
// else 127.0.0.1:5432) with a private, throw-away schema as search_path.
func examplePostgres(ctx context.Context) (*pgxpool.Pool, func()) {
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
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema+`;
		CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL);
		INSERT INTO orders VALUES ('o-1', 'PENDING')`); err != nil {
		panic(err)
	}
	return pool, func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		pool.Close()
	}
}

// A handler takes the entity's lock, runs its transaction under the lease's
// context, and checks the fencing token first in that transaction.
func ExampleLocker_Acquire() {
	ctx := context.Background()
	client, ns, done := exampleRedis()
	defer done()
	pool, cleanup := examplePostgres(ctx)
	defer cleanup()
	if err := migrate.Up(ctx, pool); err != nil {
		panic(err)
	}

	locker, err := lock.New(client, lock.WithNamespace(ns), lock.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	lease, err := locker.Acquire(ctx, "o-1")
	if errors.Is(err, lock.ErrNotObtained) {
		return // busy: retry the event later
	} else if err != nil {
		panic(err)
	}
	defer lease.Release(context.WithoutCancel(ctx))

	// lease.Context() is cancelled if the lock is lost, aborting the tx.
	err = pgx.BeginFunc(lease.Context(), pool, func(tx pgx.Tx) error {
		if err := lease.CheckFence(lease.Context(), tx); err != nil {
			return err // ErrStaleToken or ErrLost: roll back
		}
		_, err := tx.Exec(lease.Context(), `UPDATE orders SET status = 'CONFIRMED' WHERE id = 'o-1'`)
		return err
	})
	fmt.Println("committed:", err == nil, "token > 0:", lease.Token() > 0)
	// Output:
	// committed: true token > 0: true
}

// Do is the closure form: acquire, run, release.
func ExampleLocker_Do() {
	ctx := context.Background()
	client, ns, done := exampleRedis()
	defer done()

	locker, err := lock.New(client, lock.WithNamespace(ns))
	if err != nil {
		panic(err)
	}
	err = locker.Do(ctx, "order-42", func(ctx context.Context, lease *lock.Lease) error {
		// Only one goroutine, consumer or instance at a time runs this
		// for order-42.
		fmt.Println("holding", lease.Entity())
		return nil
	})
	fmt.Println(err)
	// Output:
	// holding order-42
	// <nil>
}

// Options configure a Locker, each with a Default* value; an out-of-range value is an
// error from New, never a panic.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // no connection yet
	defer client.Close()
	_, err := lock.New(client, lock.WithRetryBackoff(5*time.Millisecond, 200*time.Millisecond), lock.WithMaxWait(2*time.Second))
	fmt.Println(err)
	_, err = lock.New(client, lock.WithTTL(time.Second), lock.WithRefreshEvery(time.Second))
	fmt.Println(errors.Is(err, lock.ErrInvalidConfig))
	// Output:
	// <nil>
	// true
}
