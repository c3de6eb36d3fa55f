// Command consumer measures the consumer runtime and the standard middleware chain on a
// 12-partition topic, next to the physical limit measured in the same run: pgbench
// running the same SQL transaction (idempotency claim + one business UPDATE + one outbox
// INSERT) at the same concurrency.
//
//	go run ./bench/consumer [-events 10000] [-partitions 12] [-batch 0,16]
//
// Modes, each consuming the same backlog of events in a fresh consumer group:
//
//   - bare: the runtime and a hand-written handler running the business transaction
//     (UPDATE + outbox INSERT) with no lock, no idempotency and no middleware;
//   - chain without Lock: consumer.Standard with no Locker, to separate the Redis lease's
//     cost from the rest of the chain;
//   - chain: consumer.Standard (Recover, Tracing, CorrelationID, Metrics, Logging,
//     DeadLetter, Retry, Decode, Router filter, Redis Lock, Idempotent) around the same
//     business handler;
//   - chain/batch=N: the same chain in batch mode (consumer.WithBatch), up to N records
//     of one partition per transaction.
//
// Latency is the time one record spends in the handler (batch mode: its batch's time).
// It needs Postgres (-pg, default $CHOREO_TEST_POSTGRES_DSN or
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable), Redis (-redis, default
// $CHOREO_TEST_REDIS_ADDR or 127.0.0.1:6379) and pgbench on PATH. The broker is an
// in-process kfake cluster unless -brokers is given (kfake then shares the process and the
// machine's cores). It creates and drops its own database. Telemetry uses the no-op OpenTelemetry globals, as a service with exporters
// disabled would.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
)

type config struct {
	pg            string
	redis         string
	brokers       string
	events        int
	partitions    int
	accounts      int
	batches       []int
	pgbenchT      time.Duration
	cpuProfile    string
	latencyEvents int
	pacedRate     int
	pacedEvents   int
	rate          int // events/s produced while a mode consumes; 0: a backlog produced first
	repeat        int
}

func main() {
	var c config
	var batches string
	flag.StringVar(&c.pg, "pg", benchutil.DefaultPostgresDSN(), "Postgres DSN of a database allowed to CREATE DATABASE")
	flag.StringVar(&c.redis, "redis", benchutil.DefaultRedisAddr(), "Redis address")
	flag.StringVar(&c.brokers, "brokers", "", "Kafka seed brokers (comma-separated); default an in-process kfake cluster")
	flag.IntVar(&c.events, "events", 10_000, "events consumed per mode")
	flag.IntVar(&c.partitions, "partitions", 12, "topic partitions (= concurrency)")
	flag.IntVar(&c.accounts, "accounts", 1200, "distinct entities (record keys)")
	flag.StringVar(&batches, "batch", "0,16", "comma-separated batch sizes to run the chain with (0 = one record per transaction)")
	flag.DurationVar(&c.pgbenchT, "pgbench-time", 10*time.Second, "duration of the pgbench run")
	flag.IntVar(&c.repeat, "repeat", 3, "rounds per pass; the table shows each mode's median round")
	flag.IntVar(&c.latencyEvents, "latency-events", 2000, "events of the sequential (1 partition) latency pass; 0 skips it")
	flag.IntVar(&c.pacedRate, "paced-rate", 1000, "events/s of the paced pass (records produced while the consumer runs; 0 skips it)")
	flag.IntVar(&c.pacedEvents, "paced-events", 5000, "events per mode of the paced pass")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the consumer modes to this file")
	flag.Parse()
	var err error
	if c.batches, err = benchutil.ParseInts(batches, 0); err != nil {
		fmt.Fprintln(os.Stderr, "bench/consumer: -batch:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "bench/consumer:", err)
		os.Exit(1)
	}
}

type result struct {
	mode      string
	perSec    float64
	p50, p99  time.Duration
	evPerTx   float64
	isPgbench bool
	spread    string // min–max events/s over the rounds
	// CPU per event: the whole machine's, and the client process's (this process, which
	// also hosts the in-process broker; for pgbench, the pgbench process).
	cpuMachine, cpuClient time.Duration
	// Paced mode only: from a record's production to the end of its transaction.
	e2e50, e2e99 time.Duration
}

func run(ctx context.Context, c config) error {
	if err := benchutil.RequirePgbench(); err != nil {
		return err
	}
	dsn, drop, err := benchutil.CreateDB(ctx, c.pg, "choreo_bench_consumer")
	if err != nil {
		return err
	}
	defer drop()
	pool, err := pgxpool.New(ctx, dsn+poolSize(c.partitions+4))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := setupSchema(ctx, pool, c.accounts); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.redis, PoolSize: 2 * c.partitions})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", c.redis, err)
	}

	brokers := strings.Split(c.brokers, ",")
	if c.brokers == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return err
		}
		defer cluster.Close()
		brokers = cluster.ListenAddrs()
	}

	fmt.Printf("consumer benchmark: %d events per mode, %d partitions, %d keys, GOMAXPROCS %d, %s\n",
		c.events, c.partitions, c.accounts, runtime.GOMAXPROCS(0), brokerKind(c.brokers))

	ob, err := outbox.New()
	if err != nil {
		return err
	}
	business := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if _, err := tx.Exec(ctx, `UPDATE bench_accounts SET balance = balance + 1, version = version + 1 WHERE id = $1`, ev.Subject); err != nil {
			return err
		}
		next, err := event.New("bench", "bench.applied", ev.Subject, struct {
			Amount int `json:"amount"`
		}{1})
		if err != nil {
			return err
		}
		return ob.Enqueue(ctx, tx, "bench.applied", next.CausedBy(ev))
	}

	modes := []mode{
		{name: "bare handler (UPDATE + outbox INSERT)", bare: true},
		{name: "chain without Lock (idempotency + UPDATE + outbox)", noLock: true},
	}
	for _, b := range c.batches {
		name := "full chain (lock + idempotency + UPDATE + outbox)"
		if b > 0 {
			name = fmt.Sprintf("full chain, batch mode (%d/tx)", b)
		}
		modes = append(modes, mode{name: name, batch: b})
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if err := pass(ctx, c, "t", modes, brokers, dsn, pool, rdb, business); err != nil {
		return err
	}
	if c.pacedRate > 0 && c.pacedEvents > 0 {
		// The same partitions, at a steady rate well below saturation: the chain's added
		// latency where a service normally runs, and batch mode when no backlog forms.
		cp := c
		cp.events, cp.rate = c.pacedEvents, c.pacedRate
		fmt.Printf("\npaced: %d events produced at %d/s while each mode consumes, %d partitions; pgbench throttled to the same rate (-R)\n",
			cp.events, cp.rate, cp.partitions)
		if err := pass(ctx, cp, "p", modes, brokers, dsn, pool, rdb, business); err != nil {
			return err
		}
	}
	if c.latencyEvents > 0 {
		// One partition, one client: the chain's added latency without queueing.
		c1 := c
		c1.partitions, c1.events = 1, c.latencyEvents
		fmt.Printf("\nsequential latency: %d events, 1 partition\n", c1.events)
		if err := pass(ctx, c1, "s", []mode{
			{name: "bare handler (UPDATE + outbox INSERT)", bare: true},
			{name: "chain without Lock (idempotency + UPDATE + outbox)", noLock: true},
			{name: "full chain (lock + idempotency + UPDATE + outbox)"},
		}, brokers, dsn, pool, rdb, business); err != nil {
			return err
		}
		p50, p99, err := redisFloor(ctx, rdb, c1.events)
		if err != nil {
			return err
		}
		fmt.Printf("\nRedis floor of the lease, sequential: 3 plain round trips (SET NX PX, INCR, DEL) p50 %.2f ms, p99 %.2f ms\n", ms(p50), ms(p99))
	}
	return nil
}

// redisFloor times n sequences of three plain Redis round trips, the minimum a lease with
// a fencing token costs (obtain, token, release), with no Lua and no lock library.
func redisFloor(ctx context.Context, rdb *redis.Client, n int) (p50, p99 time.Duration, err error) {
	lat := make([]time.Duration, 0, n)
	key := fmt.Sprintf("bench-floor-%d", os.Getpid())
	for i := range n {
		start := time.Now()
		if err := rdb.SetNX(ctx, key, i, 10*time.Second).Err(); err != nil {
			return 0, 0, err
		}
		if err := rdb.Incr(ctx, key+":fence").Err(); err != nil {
			return 0, 0, err
		}
		if err := rdb.Del(ctx, key).Err(); err != nil {
			return 0, 0, err
		}
		lat = append(lat, time.Since(start))
	}
	rdb.Del(ctx, key+":fence")
	slices.Sort(lat)
	return benchutil.Percentile(lat, 0.5), benchutil.Percentile(lat, 0.99), nil
}

type mode struct {
	name   string
	batch  int
	bare   bool
	noLock bool
}

// pass runs pgbench and then every mode at c.partitions concurrency, c.repeat rounds in
// turn (so that a change in the machine's background load hits every mode alike), and
// prints each mode's median round by throughput.
func pass(ctx context.Context, c config, prefix string, modes []mode, brokers []string, dsn string,
	pool *pgxpool.Pool, rdb *redis.Client, business consumer.TxHandler,
) error {
	rounds := make([][]result, len(modes)+1) // [0]: pgbench
	for round := range max(c.repeat, 1) {
		pgb, err := runPgbench(ctx, dsn, c)
		if err != nil {
			return err
		}
		rounds[0] = append(rounds[0], pgb)
		if _, err := pool.Exec(ctx, `TRUNCATE choreo_idempotency, choreo_outbox`); err != nil {
			return err
		}
		for i, m := range modes {
			topic := fmt.Sprintf("bench-consumer-%s%d-%d", prefix, i, round)
			if err := createTopic(ctx, brokers, topic, int32(c.partitions)); err != nil {
				return err
			}
			if c.rate == 0 {
				if err := produceBacklog(ctx, brokers, topic, c.events, c.accounts); err != nil {
					return err
				}
			}
			r, err := consume(ctx, c, m.name, m.bare, m.noLock, m.batch, brokers, topic, pool, rdb, business)
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			rounds[i+1] = append(rounds[i+1], r)
			if _, err := pool.Exec(ctx, `TRUNCATE choreo_idempotency, choreo_outbox, choreo_lock_fences`); err != nil {
				return err
			}
		}
	}
	results := make([]result, len(rounds))
	for i, rs := range rounds {
		slices.SortFunc(rs, func(a, b result) int { return cmp.Compare(a.perSec, b.perSec) })
		results[i] = rs[len(rs)/2]
		results[i].spread = fmt.Sprintf("%.0f–%.0f", rs[0].perSec, rs[len(rs)-1].perSec)
	}
	printTable(results, c.partitions, c.rate > 0)
	return nil
}

func brokerKind(b string) string {
	if b == "" {
		return "in-process kfake broker"
	}
	return "brokers " + b
}

func poolSize(n int) string { return fmt.Sprintf("&pool_max_conns=%d", n) }

func setupSchema(ctx context.Context, pool *pgxpool.Pool, accounts int) error {
	if err := migrate.Up(ctx, pool); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, `
CREATE TABLE bench_accounts (id text PRIMARY KEY, balance bigint NOT NULL DEFAULT 0, version int NOT NULL DEFAULT 0);
INSERT INTO bench_accounts (id) SELECT 'acct-' || g FROM generate_series(1, `+strconv.Itoa(accounts)+`) g`)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `VACUUM ANALYZE bench_accounts`)
	return err
}

// runPgbench runs the transaction of one event as plain SQL: the idempotency claim
// statement of idempotency.Store.Claim (same text), the UPDATE, and the outbox INSERT with
// headers of the size the chain writes, at one client per partition.
func runPgbench(ctx context.Context, dsn string, c config) (result, error) {
	ev, err := event.New("bench", "bench.applied", "acct-1", struct {
		Amount int `json:"amount"`
	}{1})
	if err != nil {
		return result{}, err
	}
	rec, err := event.ToRecord("bench.applied", ev)
	if err != nil {
		return result{}, err
	}
	var hs []string
	for _, h := range rec.Headers {
		hs = append(hs, fmt.Sprintf("[%q,%q]", h.Key, h.Value))
	}
	hs = append(hs, `["traceparent","00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]`)
	headers := "[" + strings.Join(hs, ",") + "]"
	script := fmt.Sprintf(`\set aid random(1, %d)
BEGIN;
\set key random(1, 1000000000000)
INSERT INTO choreo_idempotency (scope, key, request_hash, expires_at, response) VALUES ('bench/pgbench', :client_id || '-' || :key, sha256(:key::text::bytea), now() + 604800000000::bigint * interval '1 microsecond', NULL) ON CONFLICT (scope, key) DO NOTHING;
UPDATE bench_accounts SET balance = balance + 1, version = version + 1 WHERE id = 'acct-' || :aid;
INSERT INTO choreo_outbox (topic, key, headers, payload) VALUES ('bench.applied', 'acct-' || :aid, '%s'::jsonb, '\x7b22616d6f756e74223a317d');
COMMIT;
`, c.accounts, headers)
	r, err := benchutil.Pgbench{DSN: dsn, Script: script, Clients: c.partitions, Duration: c.pgbenchT, Latencies: true,
		Rate: c.rate}.Run(ctx)
	if err != nil {
		return result{}, err
	}
	cpu := r.CPU.Per(r.Transactions)
	return result{
		mode: "pgbench, same SQL transaction", perSec: r.TPS, evPerTx: 1, isPgbench: true,
		p50: benchutil.Percentile(r.Latencies, 0.50), p99: benchutil.Percentile(r.Latencies, 0.99),
		cpuMachine: cpu.Machine, cpuClient: cpu.Process,
	}, nil
}

func createTopic(ctx context.Context, brokers []string, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, t := range []string{topic, consumer.DeadLetterTopic(topic)} {
		resp, err := adm.CreateTopic(ctx, partitions, 1, nil, t)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			return fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	return nil
}

func produceBacklog(ctx context.Context, brokers []string, topic string, n, accounts int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	var errs firstError
	for i := range n {
		r, err := benchRecord(topic, i, accounts)
		if err != nil {
			return err
		}
		cl.Produce(ctx, r, errs.note)
	}
	return cmp.Or(cl.Flush(ctx), errs.get())
}

// benchRecord is the i-th event of the benchmark, for account i mod accounts.
func benchRecord(topic string, i, accounts int) (*kgo.Record, error) {
	ev, err := event.New("bench", "bench.requested", fmt.Sprintf("acct-%d", i%accounts+1), struct {
		Amount int `json:"amount"`
	}{1})
	if err != nil {
		return nil, err
	}
	return event.ToRecord(topic, ev)
}

// firstError keeps the first error of asynchronous produce callbacks.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) note(_ *kgo.Record, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = cmp.Or(f.err, err)
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// producePaced waits until the consumer group is stable (its member owns the topic's
// partitions), then produces c.events records at c.rate per second (in 10 ms steps)
// while the group consumes them.
func producePaced(ctx context.Context, group string, brokers []string, topic string, c config) error {
	// No linger (franz-go's default is 10 ms): a record leaves as soon as it is produced,
	// so produced → handled measures the broker hop and the consumer, not the batching.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		groups, err := adm.DescribeGroups(ctx, group)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil && groups[group].State == "Stable" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	const step = 10 * time.Millisecond
	tick := time.NewTicker(step)
	defer tick.Stop()
	start := time.Now()
	var (
		produced int
		errs     firstError
	)
	for produced < c.events {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		due := min(c.events, int(time.Since(start).Seconds()*float64(c.rate)))
		for ; produced < due; produced++ {
			r, err := benchRecord(topic, produced, c.accounts)
			if err != nil {
				return err
			}
			cl.Produce(ctx, r, errs.note)
		}
	}
	if err := cl.Flush(ctx); ctx.Err() != nil {
		return nil // the mode finished or the run was cancelled
	} else if err != nil {
		return err
	}
	return errs.get()
}

// consume runs one mode until the whole backlog is handled.
func consume(ctx context.Context, c config, name string, bare, noLock bool, batch int, brokers []string, topic string,
	pool *pgxpool.Pool, rdb *redis.Client, business consumer.TxHandler,
) (result, error) {
	lat := newLatencies(c.events)
	var (
		handled  atomic.Int64
		txs      atomic.Int64
		firstAt  atomic.Int64
		finished = make(chan time.Time, 1)
	)
	// note records a transaction of ms that took d: d is each record's latency in the
	// handler, and in paced mode the time since its production is recorded too.
	e2e := newLatencies(c.events)
	note := func(ms []*consumer.Message, d time.Duration) {
		now := time.Now()
		firstAt.CompareAndSwap(0, now.Add(-d).UnixNano())
		for _, m := range ms {
			lat.add(d)
			if c.rate > 0 {
				e2e.add(now.Sub(m.Record.Timestamp))
			}
		}
		txs.Add(1)
		if handled.Add(int64(len(ms))) == int64(c.events) {
			finished <- time.Now()
		}
	}

	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return result{}, err
	}
	defer producer.Close()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	var opts []consumer.Option
	var h consumer.Handler
	switch {
	case bare:
		h = func(ctx context.Context, m *consumer.Message) error {
			start := time.Now()
			ev, err := event.FromRecord(m.Record)
			if err != nil {
				return err
			}
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return business(ctx, tx, ev) }); err != nil {
				return err
			}
			note([]*consumer.Message{m}, time.Since(start))
			return nil
		}
	default:
		locker, err := lock.New(rdb, lock.WithNamespace(fmt.Sprintf("bench-%d:", os.Getpid())))
		if err != nil {
			return result{}, err
		}
		cfg := consumer.StandardConfig{
			DB: pool, Handler: business, DeadLetter: producer, Name: "bench",
			Locker: locker,
			Logger: quiet,
		}
		if noLock {
			cfg.Locker = nil
		}
		if batch > 0 {
			bh, err := consumer.StandardBatch(cfg)
			if err != nil {
				return result{}, err
			}
			opts = append(opts, consumer.WithBatch(batch, func(ctx context.Context, ms []*consumer.Message) error {
				start := time.Now()
				if err := bh(ctx, ms); err != nil {
					return err
				}
				note(ms, time.Since(start))
				return nil
			}))
		}
		std, err := consumer.Standard(cfg)
		if err != nil {
			return result{}, err
		}
		h = func(ctx context.Context, m *consumer.Message) error {
			start := time.Now()
			if err := std(ctx, m); err != nil {
				return err
			}
			note([]*consumer.Message{m}, time.Since(start))
			return nil
		}
	}
	opts = append(opts,
		consumer.WithLogger(quiet),
		consumer.WithClientOptions(kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond)),
	)
	group := "bench-" + topic
	cons, err := consumer.New(brokers, group, []string{topic}, h, opts...)
	if err != nil {
		return result{}, err
	}
	before, err := benchutil.SampleCPU()
	if err != nil {
		return result{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cons.Run(runCtx) }()
	fed := make(chan error, 1)
	if c.rate > 0 {
		go func() { fed <- producePaced(runCtx, group, brokers, topic, c) }()
	}
	var end time.Time
	select {
	case end = <-finished:
	case err := <-fed:
		if err != nil {
			cancel()
			<-done
			return result{}, fmt.Errorf("producing: %w", err)
		}
		end = <-finished
	case err := <-done:
		cancel()
		return result{}, fmt.Errorf("consumer stopped early: %v", err)
	case <-time.After(10 * time.Minute):
		cancel()
		return result{}, errors.New("timed out")
	}
	after, cpuErr := benchutil.SampleCPU()
	cancel()
	if err := cmp.Or(<-done, cpuErr); err != nil {
		return result{}, err
	}
	cpu := after.Sub(before).Per(c.events)
	elapsed := end.Sub(time.Unix(0, firstAt.Load()))
	all, e2eAll := lat.sorted(), e2e.sorted()
	return result{
		mode: name, perSec: float64(c.events) / elapsed.Seconds(),
		p50: benchutil.Percentile(all, 0.50), p99: benchutil.Percentile(all, 0.99),
		evPerTx:    float64(c.events) / float64(txs.Load()),
		cpuMachine: cpu.Machine, cpuClient: cpu.Process,
		e2e50: benchutil.Percentile(e2eAll, 0.50), e2e99: benchutil.Percentile(e2eAll, 0.99),
	}, nil
}

type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func newLatencies(n int) *latencies { return &latencies{d: make([]time.Duration, 0, n)} }

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) sorted() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.d)
	slices.Sort(out)
	return out
}

func printTable(rs []result, partitions int, paced bool) {
	var pgbench, bare result
	for _, r := range rs {
		if r.isPgbench {
			pgbench = r
		}
		if strings.HasPrefix(r.mode, "bare") {
			bare = r
		}
	}
	extra, extraSep := "", ""
	if paced {
		extra, extraSep = " produced → handled p50 | p99 |", "---:|---:|"
	}
	fmt.Printf("\n| mode (concurrency %d) | events/s (median) | range | vs pgbench | events/tx | p50 | p99 | p50 added vs bare | CPU/event: machine | of which client |%s\n", partitions, extra)
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + extraSep)
	for _, r := range rs {
		added := "—"
		if !r.isPgbench && !strings.HasPrefix(r.mode, "bare") && r.evPerTx == 1 {
			added = fmt.Sprintf("%+.2f ms", ms(r.p50-bare.p50))
		}
		fmt.Printf("| %s | %.0f | %s | %.0f%% | %.1f | %.2f ms | %.2f ms | %s | %d µs | %d µs |",
			r.mode, r.perSec, r.spread, 100*r.perSec/pgbench.perSec, r.evPerTx, ms(r.p50), ms(r.p99), added,
			r.cpuMachine.Microseconds(), r.cpuClient.Microseconds())
		switch {
		case paced && r.isPgbench:
			fmt.Print(" — | — |")
		case paced:
			fmt.Printf(" %.2f ms | %.2f ms |", ms(r.e2e50), ms(r.e2e99))
		}
		fmt.Println()
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
