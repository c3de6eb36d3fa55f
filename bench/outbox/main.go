// Command outbox measures the outbox relay: how fast it drains a backlog,
// and the latency from a writer's COMMIT to the broker's acknowledgement at a
// steady event rate, woken in-process, by NOTIFY, or by polling alone. Next
// to them it prints the machine's limits for the same work measured in the
// same run: pgbench running the Enqueue INSERT and the relay's claim+DELETE
// SQL, and franz-go producing the same records to the same broker with no
// database at all.
//
//	go run ./bench/outbox [-rows 100000] [-rate 1000] [-duration 10s] [-held 100000]
//
// -held N adds runs of the commit→ack latency while a REPEATABLE READ snapshot keeps
// N deleted rows and every row published after them in the table, with the relay's
// read floor and without it (WithFloorInterval(0)), alternated.
//
// It needs Postgres (-pg, default $CHOREO_TEST_POSTGRES_DSN or
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable) and pgbench on PATH. The
// broker is an in-process kfake cluster unless -brokers is given (kfake then
// shares the process and its two cores with the relay). It creates and drops
// its own database.
package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
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
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/tracing"
)

type config struct {
	pg        string
	brokers   string
	rows      int
	rate      int
	duration  time.Duration
	batch     int
	writers   int
	pgbenchT  time.Duration
	skipModes string
	cpuprof   string
	rounds    int
	held      int
}

func main() {
	var c config
	flag.StringVar(&c.pg, "pg", benchutil.DefaultPostgresDSN(), "Postgres DSN of a database allowed to CREATE DATABASE")
	flag.StringVar(&c.brokers, "brokers", "", "Kafka seed brokers (comma-separated); default an in-process kfake cluster")
	flag.IntVar(&c.rows, "rows", 100_000, "backlog size for the drain benchmark")
	flag.IntVar(&c.rate, "rate", 1000, "events/s for the latency benchmark")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "duration of each latency run")
	flag.IntVar(&c.batch, "batch", 1000, "relay batch size")
	flag.IntVar(&c.writers, "writers", 8, "concurrent writers in the latency benchmark")
	flag.DurationVar(&c.pgbenchT, "pgbench-time", 5*time.Second, "duration of each pgbench run")
	flag.StringVar(&c.skipModes, "skip", "", "comma-separated latency modes to skip (inprocess,notify,poll)")
	flag.IntVar(&c.rounds, "rounds", 3, "drain rounds (each alternates pgbench and the relay; medians are reported)")
	flag.IntVar(&c.held, "held", 100_000, "deleted rows a held snapshot keeps in the table for the held-snapshot runs (0: skip them)")
	flag.StringVar(&c.cpuprof, "cpuprofile", "", "write a CPU profile of the drain run to this file")
	flag.Parse()
	if err := run(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "bench/outbox:", err)
		os.Exit(1)
	}
}

const topic = "bench.events"

// A representative event: the demo's order.created payload size, CloudEvents
// headers and a traceparent.
func newEvent(key string, i int) (event.Event, error) {
	return event.New("order", "order.created", key, map[string]any{
		"order_id": key, "customer_id": "c-" + strconv.Itoa(i%97), "amount_cents": 4999 + i%1000,
		"currency": "EUR", "items": []map[string]any{{"sku": "sku-" + strconv.Itoa(i%13), "qty": 1 + i%3}},
	})
}

func key(i int) string { return "order-" + strconv.Itoa(i%1024) }

func run(ctx context.Context, c config) error {
	if err := benchutil.RequirePgbench(); err != nil {
		return err
	}
	dsn, drop, err := benchutil.CreateDB(ctx, c.pg, "choreo_bench_outbox")
	if err != nil {
		return err
	}
	defer drop()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrate.Up(ctx, pool); err != nil {
		return err
	}

	brokers := strings.Split(c.brokers, ",")
	if c.brokers == "" {
		cl, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return err
		}
		defer cl.Close()
		brokers = cl.ListenAddrs()
	}
	if err := createTopic(ctx, brokers); err != nil {
		return err
	}

	fmt.Printf("outbox relay benchmark — %d CPUs (load average %s), %s, broker %s, batch %d\n\n", runtime.NumCPU(), loadAvg(), pgVersion(ctx, pool), brokerName(c.brokers), c.batch)
	var table [][]string
	add := func(row ...string) { table = append(table, row) }

	// Limits measured with the same SQL and the same broker.
	sample, err := sampleRow(ctx)
	if err != nil {
		return err
	}
	for _, clients := range []int{1, 8} {
		tps, err := pgbenchInsert(ctx, dsn, sample, clients, c.pgbenchT)
		if err != nil {
			return err
		}
		add("limit", fmt.Sprintf("pgbench: Enqueue's INSERT, %d client(s)", clients), fmt.Sprintf("%.0f rows/s", tps), "")
		if _, err := pool.Exec(ctx, "TRUNCATE choreo_outbox"); err != nil {
			return err
		}
	}
	kps, err := produceOnly(ctx, brokers, c.rows, c.batch)
	if err != nil {
		return err
	}
	add("limit", fmt.Sprintf("franz-go → broker only, %d records/round, no database", c.batch), fmt.Sprintf("%.0f records/s", kps), "")
	pl, err := produceLatency(ctx, brokers, 3000)
	if err != nil {
		return err
	}
	add("limit", "franz-go → broker only, one record per ProduceSync every 1 ms, no database",
		fmt.Sprintf("p50 %s  p99 %s  max %s", ms(pl.p50), ms(pl.p99), ms(pl.max)), fmt.Sprintf("%d records; the produce→ack hop alone", pl.n))

	if c.rounds > 0 {
		if err := drainRounds(ctx, pool, brokers, dsn, sample, c, add); err != nil {
			return err
		}
	}

	// Commit → ack latency at a steady rate.
	for _, mode := range []string{"inprocess", "notify", "poll"} {
		if slices.Contains(strings.Split(c.skipModes, ","), mode) {
			continue
		}
		res, err := latencyBench(ctx, pool, brokers, c, mode)
		if err != nil {
			return err
		}
		add("outbox", fmt.Sprintf("commit→ack at %d events/s, wake: %s (%d writers)", c.rate, modeName[mode], c.writers),
			fmt.Sprintf("p50 %s  p99 %s  max %s", ms(res.p50), ms(res.p99), ms(res.max)),
			fmt.Sprintf("%d events, %.0f/s achieved, %.1f rows/batch", res.n, res.achieved, res.perBatch))
	}

	if c.held > 0 {
		if err := heldRounds(ctx, pool, brokers, sample, c, add); err != nil {
			return err
		}
	}

	fmt.Printf("load average at the end: %s\n\n", loadAvg())
	fmt.Println("| kind | measurement | result | notes |")
	fmt.Println("|---|---|---|---|")
	for _, r := range table {
		fmt.Printf("| %s |\n", strings.Join(r, " | "))
	}
	return nil
}

// drainRounds measures the drain of a backlog in rounds that alternate with
// pgbench running the relay's SQL, so both see the same machine (it is shared
// and noisy).
func drainRounds(ctx context.Context, pool *pgxpool.Pool, brokers []string, dsn string, sample sample, c config, add func(...string)) error {
	var pgRates, drainRates []float64
	var enq float64
	var empty time.Duration
	for round := range c.rounds {
		rowsPerSec, err := pgbenchDrain(ctx, pool, dsn, sample, c.rows, c.batch)
		if err != nil {
			return err
		}
		pgRates = append(pgRates, rowsPerSec)
		e, drain, emp, err := drainBench(ctx, pool, brokers, c, sample, round == 0)
		if err != nil {
			return err
		}
		if round == 0 {
			enq, empty = e, emp
		}
		drainRates = append(drainRates, drain)
	}
	add("limit", fmt.Sprintf("pgbench: relay's claim + DELETE, 1 session, %d rows/round, synchronous_commit=off", c.batch), fmt.Sprintf("%.0f rows/s", median(pgRates)), rounds(pgRates))
	add("outbox", fmt.Sprintf("Enqueue: 1 writer, 1,000 events per tx (%d rows)", c.rows), fmt.Sprintf("%.0f events/s", enq), "")
	add("outbox", fmt.Sprintf("relay drains a %d-row backlog (ack of the last row)", c.rows), fmt.Sprintf("%.0f events/s", median(drainRates)),
		rounds(drainRates)+fmt.Sprintf("; %.0f%% of pgbench; round 1 table empty after %s", 100*median(drainRates)/median(pgRates), empty.Round(time.Millisecond)))

	return nil
}

var modeName = map[string]string{
	"inprocess": "in-process signal",
	"notify":    "NOTIFY after commit",
	"poll":      "polling only (500ms)",
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func rounds(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return "median of " + strings.Join(parts, ", ")
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

func brokerName(b string) string {
	if b == "" {
		return "in-process kfake"
	}
	return b
}

func pgVersion(ctx context.Context, pool *pgxpool.Pool) string {
	var v string
	_ = pool.QueryRow(ctx, "SHOW server_version").Scan(&v)
	return "Postgres " + v
}

func createTopic(ctx context.Context, brokers []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	resps, err := kadm.NewClient(cl).CreateTopics(ctx, 8, 1, nil, topic, topic+".raw")
	if err != nil {
		return err
	}
	for _, r := range resps {
		if r.Err != nil && !strings.Contains(r.Err.Error(), "TOPIC_ALREADY_EXISTS") {
			return r.Err
		}
	}
	return nil
}

// producer is configured as the package documentation recommends for a
// relay: franz-go's defaults (idempotent, acks=all) without lingering.
func producer(brokers []string) (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
}

// sampleRow is what Enqueue stores for a representative event: the headers
// JSON and the payload, for the pgbench scripts.
type sample struct {
	headers string
	payload []byte
}

func sampleRow(ctx context.Context) (sample, error) {
	ev, err := newEvent(key(1), 1)
	if err != nil {
		return sample{}, err
	}
	rec, err := event.ToRecord(topic, ev)
	if err != nil {
		return sample{}, err
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")})
	var pairs []string
	for _, h := range rec.Headers {
		pairs = append(pairs, fmt.Sprintf(`["%s","%s"]`, h.Key, h.Value))
	}
	_ = ctx
	return sample{headers: "[" + strings.Join(pairs, ",") + "]", payload: rec.Value}, nil
}

func sqlLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// pgbenchInsert runs the statement Enqueue sends for one event, one event per
// transaction.
func pgbenchInsert(ctx context.Context, dsn string, s sample, clients int, d time.Duration) (float64, error) {
	script := fmt.Sprintf("\\set k random(1, 1024)\nINSERT INTO choreo_outbox (topic, key, headers, payload) VALUES ('%s', 'order-' || :k, %s::jsonb, '\\x%s'::bytea);\n",
		topic, sqlLiteral(s.headers), hex.EncodeToString(s.payload))
	r, err := benchutil.Pgbench{DSN: dsn, Script: script, Clients: clients, Duration: d, QueryMode: "simple"}.Run(ctx)
	return r.TPS, err
}

// pgbenchDrain loads a backlog and lets pgbench run the relay's statements on
// one session: read the oldest batch, delete it by id.
func pgbenchDrain(ctx context.Context, pool *pgxpool.Pool, dsn string, s sample, rows, batch int) (float64, error) {
	if err := fill(ctx, pool, s, rows); err != nil {
		return 0, err
	}
	script := fmt.Sprintf("SELECT id, topic, key, headers, payload, created_at FROM choreo_outbox ORDER BY id LIMIT %d;\n"+
		"DELETE FROM choreo_outbox WHERE id = ANY(ARRAY(SELECT id FROM choreo_outbox ORDER BY id LIMIT %d));\n", batch, batch)
	// The relay's session runs with synchronous_commit=off (a lost delete
	// only republishes rows); give pgbench the same setting.
	r, err := benchutil.Pgbench{DSN: dsn, Script: script, Transactions: rows / batch, QueryMode: "simple",
		PGOptions: "-c synchronous_commit=off"}.Run(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := pool.Exec(ctx, "TRUNCATE choreo_outbox"); err != nil {
		return 0, err
	}
	return r.TPS * float64(batch), nil
}

func fill(ctx context.Context, pool *pgxpool.Pool, s sample, rows int) error {
	_, err := pool.Exec(ctx, "INSERT INTO choreo_outbox (topic, key, headers, payload) SELECT $1, 'order-' || (g % 1024), $2::jsonb, $3 FROM generate_series(1, $4) g",
		topic, s.headers, s.payload, rows)
	if err == nil {
		_, err = pool.Exec(ctx, "VACUUM ANALYZE choreo_outbox")
	}
	return err
}

// produceOnly produces rows records like the relay does (rounds of batch,
// waiting for every ack) without any database work.
func produceOnly(ctx context.Context, brokers []string, rows, batch int) (float64, error) {
	cl, err := producer(brokers)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, 0, rows)
	for i := range rows {
		ev, err := newEvent(key(i), i)
		if err != nil {
			return 0, err
		}
		r, err := event.ToRecord(topic+".raw", ev)
		if err != nil {
			return 0, err
		}
		recs = append(recs, r)
	}
	// Warm up metadata and the producer id.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic + ".raw", Value: []byte("{}")}).FirstErr(); err != nil {
		return 0, err
	}
	start := time.Now()
	for off := 0; off < rows; off += batch {
		if err := cl.ProduceSync(ctx, recs[off:min(off+batch, rows)]...).FirstErr(); err != nil {
			return 0, err
		}
	}
	return float64(rows) / time.Since(start).Seconds(), nil
}

// produceLatency produces n records one at a time, 1 ms apart, and measures
// each one's produce→ack time: the broker hop of commit→ack, without the
// database.
func produceLatency(ctx context.Context, brokers []string, n int) (latency, error) {
	cl, err := producer(brokers)
	if err != nil {
		return latency{}, err
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic + ".raw", Value: []byte("{}")}).FirstErr(); err != nil {
		return latency{}, err
	}
	ds := make([]time.Duration, 0, n)
	for i := range n {
		ev, err := newEvent(key(i), i)
		if err != nil {
			return latency{}, err
		}
		rec, err := event.ToRecord(topic+".raw", ev)
		if err != nil {
			return latency{}, err
		}
		t := time.Now()
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return latency{}, err
		}
		ds = append(ds, time.Since(t))
		time.Sleep(time.Millisecond)
	}
	slices.Sort(ds)
	return latency{n: n, p50: benchutil.Percentile(ds, 0.5), p99: benchutil.Percentile(ds, 0.99), max: ds[n-1]}, nil
}

func drainBench(ctx context.Context, pool *pgxpool.Pool, brokers []string, c config, s sample, viaEnqueue bool) (enqueueRate, drainRate float64, empty time.Duration, err error) {
	ob, err := outbox.New()
	if err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	const perTx = 1000
	if !viaEnqueue {
		if err := fill(ctx, pool, s, c.rows); err != nil {
			return 0, 0, 0, err
		}
	}
	for off := 0; viaEnqueue && off < c.rows; off += perTx {
		evs := make([]event.Event, 0, perTx)
		for i := off; i < min(off+perTx, c.rows); i++ {
			ev, err := newEvent(key(i), i)
			if err != nil {
				return 0, 0, 0, err
			}
			evs = append(evs, ev)
		}
		if err := ob.InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error { return ob.Enqueue(ctx, tx, topic, evs...) }); err != nil {
			return 0, 0, 0, err
		}
	}
	enqueueRate = float64(c.rows) / time.Since(start).Seconds()
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE choreo_outbox"); err != nil {
		return 0, 0, 0, err
	}

	cl, err := producer(brokers)
	if err != nil {
		return 0, 0, 0, err
	}
	defer cl.Close()
	var acked atomic.Int64
	done := make(chan time.Time, 1)
	relay, err := outbox.NewRelay(pool, cl, ob, outbox.WithBatchSize(c.batch),
		outbox.WithAfterAck(func(_ context.Context, b []outbox.Published) error {
			if acked.Add(int64(len(b))) == int64(c.rows) {
				done <- time.Now()
			}
			return nil
		}))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var runErr error
	if c.cpuprof != "" && viaEnqueue {
		f, err := os.Create(c.cpuprof)
		if err != nil {
			return 0, 0, 0, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return 0, 0, 0, err
		}
		defer pprof.StopCPUProfile()
	}
	start = time.Now()
	wg.Go(func() { runErr = relay.Run(rctx) })
	var last time.Time
	select {
	case last = <-done:
	case <-time.After(10 * time.Minute):
		cancel()
		return 0, 0, 0, errors.New("drain did not finish in 10 minutes")
	}
	for {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM choreo_outbox").Scan(&n); err != nil {
			cancel()
			return 0, 0, 0, err
		}
		if n == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	empty = time.Since(start)
	cancel()
	wg.Wait()
	if runErr != nil {
		return 0, 0, 0, runErr
	}
	return enqueueRate, float64(c.rows) / last.Sub(start).Seconds(), empty, nil
}

type latency struct {
	n             int
	p50, p99, max time.Duration
	achieved      float64
	perBatch      float64
}

// latencyBench writes rate events/s for c.duration, one event per
// transaction, spread over c.writers connections, and measures each event's
// time from COMMIT returning to the broker's ack.
func latencyBench(ctx context.Context, pool *pgxpool.Pool, brokers []string, c config, mode string, opts ...outbox.RelayOption) (latency, error) {
	if _, err := pool.Exec(ctx, "DELETE FROM choreo_outbox"); err != nil { // not TRUNCATE: it would empty a held snapshot's table
		return latency{}, err
	}
	relayOutbox, err := outbox.New()
	if err != nil {
		return latency{}, err
	}
	writer := relayOutbox // in-process: Wake signals the relay directly
	switch mode {
	case "notify":
		writer, err = outbox.New(outbox.WithNotifier(pool)) // like a writer in another process
	case "poll":
		writer, err = outbox.New() // nobody wakes the relay
	}
	if err != nil {
		return latency{}, err
	}
	var mu sync.Mutex
	commits := map[string]time.Time{}
	acks := map[string]time.Time{}
	var batches, rows atomic.Int64
	cl, err := producer(brokers)
	if err != nil {
		return latency{}, err
	}
	defer cl.Close()
	relay, err := outbox.NewRelay(pool, cl, relayOutbox, append([]outbox.RelayOption{outbox.WithBatchSize(c.batch),
		outbox.WithAfterAck(func(_ context.Context, b []outbox.Published) error {
			batches.Add(1)
			rows.Add(int64(len(b)))
			mu.Lock()
			defer mu.Unlock()
			for _, p := range b {
				acks[(tracing.RecordCarrier{Record: p.Record}).Get(event.HeaderID)] = p.AckedAt
			}
			return nil
		})}, opts...)...)
	if err != nil {
		return latency{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var rwg sync.WaitGroup
	rwg.Go(func() { _ = relay.Run(rctx) })
	for !relay.Leader() {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // let the LISTEN session come up

	total := int(c.duration.Seconds() * float64(c.rate))
	interval := time.Second / time.Duration(c.rate)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, c.writers)
	for range c.writers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
					time.Sleep(d)
				}
				ev, err := newEvent(key(i), i)
				if err != nil {
					errs <- err
					return
				}
				tx, err := pool.Begin(ctx)
				if err == nil {
					err = writer.Enqueue(ctx, tx, topic, ev)
				}
				if err == nil {
					err = tx.Commit(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
				now := time.Now()
				writer.Wake()
				mu.Lock()
				commits[ev.ID] = now
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return latency{}, err
	}
	achieved := float64(total) / time.Since(start).Seconds()
	deadline := time.Now().Add(time.Minute)
	for rows.Load() < int64(total) {
		if time.Now().After(deadline) {
			return latency{}, fmt.Errorf("%s: only %d of %d events acknowledged", mode, rows.Load(), total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	rwg.Wait()

	lat := make([]time.Duration, 0, total)
	for id, ct := range commits {
		at, ok := acks[id]
		if !ok {
			return latency{}, fmt.Errorf("%s: event %s never acknowledged", mode, id)
		}
		// The relay may publish a row between COMMIT and the writer reading
		// the clock: count that as zero.
		lat = append(lat, max(at.Sub(ct), 0))
	}
	slices.Sort(lat)
	return latency{
		n:        len(lat),
		p50:      benchutil.Percentile(lat, 0.5),
		p99:      benchutil.Percentile(lat, 0.99),
		max:      lat[len(lat)-1],
		achieved: achieved,
		perBatch: float64(rows.Load()) / float64(batches.Load()),
	}, nil
}
