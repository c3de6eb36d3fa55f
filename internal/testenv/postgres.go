package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const defaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

type resolved struct {
	value string
	err   error
}

var postgresOnce = sync.OnceValue(func() resolved {
	if dsn := os.Getenv("CHOREO_TEST_POSTGRES_DSN"); dsn != "" {
		return resolved{dsn, ping(dsn)}
	}
	err := ping(defaultPostgresDSN)
	if err == nil {
		return resolved{value: defaultPostgresDSN}
	}
	if dockerAvailable() {
		dsn, cerr := containerAddr("postgres")
		if cerr != nil {
			return resolved{err: fmt.Errorf("%v; testcontainers: %w", err, cerr)}
		}
		return resolved{dsn, ping(dsn)}
	}
	return resolved{err: err}
})

func ping(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// PostgresDSN creates a fresh, empty database for this test and returns its DSN. The
// database is dropped when the test ends.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	return postgresDSN(t, "choreo_t")
}

// PostgresNamed is Postgres on a database whose name starts with prefix (lower-cased,
// characters other than letters, digits and _ replaced, at most 20 kept) followed by
// the test's name and a random suffix, so that a test's database is easy to find in
// pg_stat_activity or psql while the test runs.
func PostgresNamed(t testing.TB, prefix string) *pgxpool.Pool {
	t.Helper()
	prefix = unsafeChars.ReplaceAllString(strings.ToLower(prefix), "_")
	if len(prefix) > 20 {
		prefix = prefix[:20]
	}
	return pool(t, postgresDSN(t, prefix+"_t"), nil)
}

func postgresDSN(t testing.TB, prefix string) string {
	t.Helper()
	r := postgresOnce()
	if r.err != nil {
		need(t, "Postgres", r.err, "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start  (CHOREO_TEST_POSTGRES_DSN=postgres://...)")
	}
	name := Name(t, prefix)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, r.value)
	if err != nil {
		t.Fatalf("testenv: connect to Postgres: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, r.value)
		if err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(r.value)
	if err != nil || u.Scheme == "" {
		// key=value DSN
		return r.value + " dbname=" + name
	}
	u.Path = "/" + name
	return u.String()
}

// Postgres returns a pool on a fresh, empty database for this test. The pool is closed and
// the database dropped when the test ends.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PostgresWith(t, nil)
}

// PostgresWith is Postgres with the pool's configuration changed by configure (if not
// nil) before the pool is made: a tracer that counts round trips, a query execution
// mode, a pool size.
func PostgresWith(t testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	return pool(t, PostgresDSN(t), configure)
}

// pool opens a pool on dsn, configured by configure if not nil, closed when t ends.
func pool(t testing.TB, dsn string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("testenv: pool config: %v", err)
	}
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("testenv: pool: %v", err)
	}
	t.Cleanup(pool.Close) // runs before the database is dropped (cleanups run last-in first-out)
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatalf("testenv: ping %s: %v", dsn, errors.Unwrap(err))
	}
	return pool
}
