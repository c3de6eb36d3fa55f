// Package benchutil holds what the benchmark programs under bench/ share: their default
// Postgres DSN and Redis address, a throwaway database per run, running pgbench with a
// custom script (the limit each figure is printed next to), percentiles of latency
// samples, and CPU time samples of the machine and a process.
//
// It is for the benchmark commands only; nothing in the library imports it.
package benchutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	defaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	defaultRedisAddr   = "127.0.0.1:6379"
)

// DefaultPostgresDSN is the -pg flag's default: $CHOREO_TEST_POSTGRES_DSN, or the local
// server as user postgres without TLS.
func DefaultPostgresDSN() string { return envOr("CHOREO_TEST_POSTGRES_DSN", defaultPostgresDSN) }

// DefaultRedisAddr is the -redis flag's default: $CHOREO_TEST_REDIS_ADDR, or 127.0.0.1:6379.
func DefaultRedisAddr() string { return envOr("CHOREO_TEST_REDIS_ADDR", defaultRedisAddr) }

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// CreateDB creates an empty database named prefix, an underscore and random hex on the
// server admin points at (admin's user must be allowed to CREATE DATABASE), and returns a
// DSN for it and a function that drops it. The DSN is admin's with the database name
// replaced and, when admin names no sslmode, sslmode=disable.
func CreateDB(ctx context.Context, admin, prefix string) (dsn string, drop func() error, err error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", nil, err
	}
	name := prefix + "_" + hex.EncodeToString(b)
	ident := pgx.Identifier{name}.Sanitize()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("postgres %s: %w", admin, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	drop = func() error {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	return withDatabase(admin, name), drop, nil
}

// withDatabase returns dsn (a URL or key=value pairs) naming database name instead of its
// own, with sslmode=disable unless dsn sets sslmode.
func withDatabase(dsn, name string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		dsn += " dbname=" + name
		if !strings.Contains(dsn, "sslmode=") {
			dsn += " sslmode=disable"
		}
		return dsn
	}
	u.Path = "/" + name
	q := u.Query()
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// ParseInts parses a comma-separated list of integers such as a -clients flag's "1,8",
// each at least least.
func ParseInts(list string, least int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < least {
			return nil, fmt.Errorf("bad number %q in %q (want integers >= %d)", f, list, least)
		}
		out = append(out, n)
	}
	return out, nil
}

// Percentile returns the sample at quantile p (0 to 1) of sorted, which must be in
// ascending order: the element at index p·len, the last one for p = 1. It returns 0 for no
// samples.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(max(int(p*float64(len(sorted))), 0), len(sorted)-1)]
}

// GitCommit returns HEAD's hash and whether the worktree has uncommitted changes.
func GitCommit(ctx context.Context) (string, bool) {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown", false
	}
	st, _ := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
	return strings.TrimSpace(string(out)), len(strings.TrimSpace(string(st))) > 0
}
