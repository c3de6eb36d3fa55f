// Command guards measures what the two guards every handler runs under
// cost: the idempotency claim inside a Postgres transaction, and the Redis
// lock acquire+release round trip. Each figure is printed next to the
// machine's limit for the equivalent bare operation, measured in the same
// run with pgbench and redis-benchmark.
//
//	go run ./bench/guards [-duration 5s] [-clients 1,8]
//
// It needs Postgres (-pg, default $CHOREO_TEST_POSTGRES_DSN or
// 127.0.0.1:5432), Redis (-redis, default $CHOREO_TEST_REDIS_ADDR or
// 127.0.0.1:6379), and pgbench and redis-benchmark on PATH. It creates and
// drops its own database and deletes its Redis keys.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
)

type result struct {
	group   string
	name    string
	tool    string
	clients int
	guarded bool // the operation with the guard, compared with the one without
	ops     int
	perSec  float64
	p50     time.Duration
	p99     time.Duration

	lat     []time.Duration // every operation's latency (empty for redis-benchmark)
	elapsed time.Duration
}

// merge adds the samples of another round of the same measurement.
func (r result) merge(o result) result {
	if r.tool == "" {
		return o
	}
	r.lat = append(r.lat, o.lat...)
	r.ops += o.ops
	if r.lat == nil { // redis-benchmark: no samples, average the summaries
		r.perSec = (r.perSec + o.perSec) / 2
		r.p50 = (r.p50 + o.p50) / 2
		r.p99 = max(r.p99, o.p99)
		return r
	}
	r.elapsed += o.elapsed
	sum := summarize(r.lat, 0)
	r.p50, r.p99 = sum.p50, sum.p99
	r.perSec = float64(r.ops) / r.elapsed.Seconds()
	return r
}

func main() {
	var (
		pgDSN      = flag.String("pg", benchutil.DefaultPostgresDSN(), "Postgres DSN (a database is created next to it)")
		redisAddr  = flag.String("redis", benchutil.DefaultRedisAddr(), "Redis address")
		duration   = flag.Duration("duration", 5*time.Second, "measuring time per figure")
		clientsF   = flag.String("clients", "1,8", "comma-separated client counts")
		rounds     = flag.Int("rounds", 3, "interleaved rounds per figure (duration is split over them)")
		syncCommit = flag.String("synchronous-commit", "on", "Postgres synchronous_commit for both pgbench and pgx (off isolates the statements' cost from the WAL flush)")
	)
	flag.Parse()
	if *rounds < 1 {
		fatal(fmt.Errorf("bad -rounds %d", *rounds))
	}
	clients, err := benchutil.ParseInts(*clientsF, 1)
	if err != nil {
		fatal(fmt.Errorf("-clients: %w", err))
	}
	if err := benchutil.RequirePgbench(); err != nil {
		fatal(err)
	}
	ctx := context.Background()
	var results []result

	// The machine is shared, so load drifts during a run. Each figure is
	// measured in several short slices, interleaved with the figures it is
	// compared with (bare, guarded, bare, guarded, ...), and merged.
	slice := *duration / time.Duration(*rounds)
	pg, err := newPGBench(ctx, *pgDSN, slices.Max(clients), *syncCommit)
	if err != nil {
		fatal(err)
	}
	rb := newRedisBench(*redisAddr)
	for _, c := range clients {
		ops := []func() (result, error){
			func() (result, error) {
				return pg.pgbench(ctx, "business tx (UPDATE + INSERT)", pgbenchBare, false, c, slice)
			},
			func() (result, error) { return pg.goTx(ctx, "business tx (UPDATE + INSERT)", false, c, slice) },
			func() (result, error) {
				return pg.pgbench(ctx, "business tx + claim + complete (same SQL)", pgbenchGuarded, true, c, slice)
			},
			func() (result, error) {
				return pg.goTx(ctx, "business tx + Store.Claim + Store.Complete", true, c, slice)
			},
			func() (result, error) { return rb.redisBenchmark(ctx, c, slice) },
			func() (result, error) { return rb.goBare(ctx, c, slice) },
			func() (result, error) { return rb.goLocker(ctx, c, slice) },
		}
		merged := make([]result, len(ops))
		for round := range *rounds {
			for i, op := range ops {
				res, err := op()
				if err != nil {
					pg.close()
					rb.close(ctx)
					fatal(err)
				}
				merged[i] = merged[i].merge(res)
			}
			fmt.Fprintf(os.Stderr, "clients=%d: round %d/%d done\n", c, round+1, *rounds)
		}
		results = append(results, merged...)
	}
	pg.close()
	rb.close(ctx)

	printTable(results, *syncCommit)
}

func printTable(rs []result, syncCommit string) {
	fmt.Printf("guards benchmark: %s, GOMAXPROCS=%d, %s, synchronous_commit=%s\n\n",
		time.Now().UTC().Format(time.RFC3339), runtime.GOMAXPROCS(0), runtime.Version(), syncCommit)
	fmt.Println("| guard | operation | tool | clients | ops | ops/s | p50 | p99 |")
	fmt.Println("|---|---|---|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Printf("| %s | %s | %s | %d | %d | %.0f | %s | %s |\n",
			r.group, r.name, r.tool, r.clients, r.ops, r.perSec, fmtDur(r.p50), fmtDur(r.p99))
	}
	fmt.Println()
	// Added latency of the idempotency guard, per client count.
	for _, tool := range []string{"pgbench", "pgx"} {
		for _, c := range uniqueClients(rs) {
			bare, guarded := find(rs, tool, c, false), find(rs, tool, c, true)
			if bare == nil || guarded == nil {
				continue
			}
			fmt.Printf("idempotency guard, %s, %d client(s): %+.3f ms p50, %+.3f ms p99 per event; %.0f%% of bare throughput\n",
				tool, c, ms(guarded.p50-bare.p50), ms(guarded.p99-bare.p99), 100*guarded.perSec/bare.perSec)
		}
	}
}

func uniqueClients(rs []result) []int {
	var cs []int
	for _, r := range rs {
		if !slices.Contains(cs, r.clients) {
			cs = append(cs, r.clients)
		}
	}
	return cs
}

func find(rs []result, tool string, clients int, guarded bool) *result {
	for i, r := range rs {
		if r.group == "idempotency" && r.tool == tool && r.clients == clients && r.guarded == guarded {
			return &rs[i]
		}
	}
	return nil
}

func fmtDur(d time.Duration) string { return fmt.Sprintf("%.3f ms", ms(d)) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// --- Postgres --------------------------------------------------------------

const setupSQL = `
CREATE TABLE bench_accounts (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO bench_accounts SELECT i, 0 FROM generate_series(1, 10000) AS i;
CREATE TABLE bench_events (id bigserial PRIMARY KEY, account int NOT NULL, payload bytea NOT NULL);
`

const (
	businessUpdate = `UPDATE bench_accounts SET balance = balance + 1 WHERE id = $1`
	businessInsert = `INSERT INTO bench_events (account, payload) VALUES ($1, $2)`
)

// The pgbench scripts run the same statements as the Go side; the guarded
// one inlines the SQL that Store.Claim and Store.Complete send.
const pgbenchBare = `\set aid random(1, 10000)
BEGIN;
UPDATE bench_accounts SET balance = balance + 1 WHERE id = :aid;
INSERT INTO bench_events (account, payload) VALUES (:aid, '\x7b226f72646572223a317d');
END;
`

const pgbenchGuarded = `\set aid random(1, 10000)
\set k random(1, 9000000000000000)
BEGIN;
INSERT INTO "choreo_idempotency" (scope, key, request_hash, expires_at, response)
VALUES ('pgbench', CAST(:k AS text), '\x9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08', now() + 604800000000 * interval '1 microsecond', NULL)
ON CONFLICT (scope, key) DO NOTHING;
UPDATE bench_accounts SET balance = balance + 1 WHERE id = :aid;
INSERT INTO bench_events (account, payload) VALUES (:aid, '\x7b226f72646572223a317d');
UPDATE "choreo_idempotency" SET response = '\x6f6b' WHERE scope = 'pgbench' AND key = CAST(:k AS text);
END;
`

type pgBench struct {
	dsn   string
	drop  func() error
	pool  *pgxpool.Pool
	store *idempotency.Store
	seq   atomic.Int64
	run   string
}

func newPGBench(ctx context.Context, adminDSN string, maxClients int, syncCommit string) (*pgBench, error) {
	if u, err := url.Parse(adminDSN); err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("-pg must be a postgres:// URL, got %q", adminDSN)
	}
	store, err := idempotency.NewStore()
	if err != nil {
		return nil, err
	}
	b := &pgBench{run: randomHex(4), store: store}
	dsn, drop, err := benchutil.CreateDB(ctx, adminDSN, "choreo_bench_guards")
	if err != nil {
		return nil, err
	}
	b.drop = drop
	u, err := url.Parse(dsn)
	if err != nil {
		b.close()
		return nil, err
	}
	// Read by libpq (pgbench) and pgx alike; libpq wants %20, not +.
	opt := strings.ReplaceAll(url.QueryEscape("-c synchronous_commit="+syncCommit), "+", "%20")
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += "options=" + opt
	b.dsn = u.String()
	cfg, err := pgxpool.ParseConfig(b.dsn)
	if err != nil {
		b.close()
		return nil, err
	}
	cfg.MaxConns = int32(maxClients)
	if b.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		b.close()
		return nil, err
	}
	if err = migrate.Up(ctx, b.pool); err == nil {
		_, err = b.pool.Exec(ctx, setupSQL)
	}
	if err != nil {
		b.close()
		return nil, fmt.Errorf("set up: %w", err)
	}
	return b, nil
}

func (b *pgBench) close() {
	if b.pool != nil {
		b.pool.Close()
	}
	if err := b.drop(); err != nil {
		fmt.Fprintln(os.Stderr, "guards:", err)
	}
}

// goTx runs the business transaction through pgx, optionally guarded by
// Store.Claim and Store.Complete.
func (b *pgBench) goTx(ctx context.Context, name string, guarded bool, clients int, d time.Duration) (result, error) {
	payload := []byte(`{"order":1}`)
	hash := idempotency.Hash(payload)
	op := func(ctx context.Context, worker int) error {
		n := b.seq.Add(1)
		aid := int(n%10000) + 1
		key := b.run + "-" + strconv.FormatInt(n, 10)
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if guarded {
				c, err := b.store.Claim(ctx, tx, "pgx", key, hash)
				if err != nil {
					return err
				}
				if c.Duplicate {
					return errors.New("unexpected duplicate")
				}
			}
			if _, err := tx.Exec(ctx, businessUpdate, aid); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, businessInsert, aid, payload); err != nil {
				return err
			}
			if guarded {
				return b.store.Complete(ctx, tx, "pgx", key, []byte("ok"))
			}
			return nil
		})
	}
	r, err := measure(ctx, clients, d, op)
	r.group, r.name, r.tool, r.clients, r.guarded = "idempotency", name, "pgx", clients, guarded
	return r, err
}

// pgbench runs script with per-transaction logging and computes the same
// percentiles as measure from the log.
func (b *pgBench) pgbench(ctx context.Context, name, script string, guarded bool, clients int, d time.Duration) (result, error) {
	pr, err := benchutil.Pgbench{DSN: b.dsn, Script: script, Clients: clients, Duration: d, Latencies: true}.Run(ctx)
	if err != nil {
		return result{}, err
	}
	r := summarize(pr.Latencies, time.Duration(float64(len(pr.Latencies))/pr.TPS*float64(time.Second)))
	r.group, r.name, r.tool, r.clients, r.guarded = "idempotency", name, "pgbench", clients, guarded
	return r, nil
}

// --- Redis -----------------------------------------------------------------

type redisBench struct {
	addr   string
	client *redis.Client
	ns     string
}

func newRedisBench(addr string) *redisBench {
	return &redisBench{
		addr:   addr,
		client: redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64}),
		ns:     "choreo_bench_" + randomHex(4) + ":",
	}
}

func (b *redisBench) close(ctx context.Context) {
	iter := b.client.Scan(ctx, 0, b.ns+"*", 1000).Iterator()
	for iter.Next(ctx) {
		b.client.Del(ctx, iter.Val())
	}
	b.client.Close()
}

// redisBenchmark measures one SET NX PX round trip, the bare operation
// under a lock acquisition.
func (b *redisBench) redisBenchmark(ctx context.Context, clients int, d time.Duration) (result, error) {
	host, port, ok := strings.Cut(b.addr, ":")
	if !ok {
		return result{}, fmt.Errorf("-redis must be host:port")
	}
	// A request count that takes roughly d on loopback (~10k req/s per
	// client, capped by the server).
	n := max(1000, int(d.Seconds()*10000)*min(clients, 4))
	cmd := exec.CommandContext(ctx, "redis-benchmark", "-h", host, "-p", port, "-c", strconv.Itoa(clients),
		"-n", strconv.Itoa(n), "-r", "100000", "--csv",
		"SET", b.ns+"rb:__rand_int__", "v", "NX", "PX", "10000")
	out, err := cmd.Output()
	if err != nil {
		return result{}, fmt.Errorf("redis-benchmark: %w", err)
	}
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil || len(recs) < 2 || len(recs[1]) < 7 {
		return result{}, fmt.Errorf("redis-benchmark: unexpected output %q", out)
	}
	rps, _ := strconv.ParseFloat(recs[1][1], 64)
	p50, _ := strconv.ParseFloat(recs[1][4], 64)
	p99, _ := strconv.ParseFloat(recs[1][6], 64)
	return result{
		group: "lock", name: "SET NX PX (1 round trip)", tool: "redis-benchmark", clients: clients, ops: n,
		perSec: rps, p50: time.Duration(p50 * float64(time.Millisecond)), p99: time.Duration(p99 * float64(time.Millisecond)),
	}, nil
}

// goBare is SET NX PX + DEL through go-redis: a naive lock without token
// check, fencing or watchdog (2 round trips).
func (b *redisBench) goBare(ctx context.Context, clients int, d time.Duration) (result, error) {
	op := func(ctx context.Context, worker int) error {
		key := b.ns + "bare:" + strconv.Itoa(worker)
		ok, err := b.client.SetNX(ctx, key, "v", 10*time.Second).Result()
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("bare lock not obtained")
		}
		return b.client.Del(ctx, key).Err()
	}
	r, err := measure(ctx, clients, d, op)
	r.group, r.name, r.tool, r.clients = "lock", "SET NX PX + DEL (2 round trips)", "go-redis", clients
	return r, err
}

// goLocker is Locker.Acquire + Lease.Release: 2 round trips (one script obtains the
// lock and its fencing token, one releases).
func (b *redisBench) goLocker(ctx context.Context, clients int, d time.Duration) (result, error) {
	locker, err := lock.New(b.client, lock.WithNamespace(b.ns+"lock:"), lock.WithoutRetry())
	if err != nil {
		return result{}, err
	}
	op := func(ctx context.Context, worker int) error {
		lease, err := locker.Acquire(ctx, "entity-"+strconv.Itoa(worker))
		if err != nil {
			return err
		}
		return lease.Release(ctx)
	}
	r, err := measure(ctx, clients, d, op)
	r.group, r.name, r.tool, r.clients = "lock", "Locker.Acquire + Lease.Release (2 round trips)", "choreo/lock", clients
	return r, err
}

// --- measuring -------------------------------------------------------------

// measure runs op from clients goroutines for a short warm-up and then for d,
// recording every operation's latency.
func measure(ctx context.Context, clients int, d time.Duration, op func(ctx context.Context, worker int) error) (result, error) {
	warm := time.Now().Add(min(d/5, time.Second))
	for time.Now().Before(warm) {
		if err := op(ctx, 0); err != nil {
			return result{}, err
		}
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		all      []time.Duration
		firstErr error
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := range clients {
		wg.Go(func() {
			lat := make([]time.Duration, 0, 4096)
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := op(ctx, w); err != nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
					return
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if firstErr != nil {
		return result{}, firstErr
	}
	return summarize(all, time.Since(start)), nil
}

func summarize(lat []time.Duration, elapsed time.Duration) result {
	if len(lat) == 0 {
		return result{}
	}
	slices.Sort(lat)
	r := result{
		ops:     len(lat),
		p50:     benchutil.Percentile(lat, 0.50),
		p99:     benchutil.Percentile(lat, 0.99),
		lat:     lat,
		elapsed: elapsed,
	}
	if elapsed > 0 {
		r.perSec = float64(len(lat)) / elapsed.Seconds()
	}
	return r
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "guards:", err)
	os.Exit(1)
}
