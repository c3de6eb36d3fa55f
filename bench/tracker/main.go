// Command tracker measures how fast the saga tracker (package tracker) indexes saga
// events, against the rate at which the reference saga produces them at saturation.
//
// It produces -orders complete order sagas (order.created → payment.authorized →
// stock.reserved → order.confirmed, each caused by the one before, with a traceparent)
// to orders.events, payments.events and inventory.events on an in-process kfake broker,
// then starts a tracker (deploy/tracker/order.json, its own group and database, default
// settings) with Run and times it from start until every event is indexed. The saga's
// own event rate is the peak confirmed orders/s that bench/saga wrote to -saga-results
// (make bench runs bench/saga first, in the same invocation) times the events of a
// confirmed order (4); -saga-rate gives it instead. The table shows both, their ratio
// (the bar is 10×) and the storage per indexed event (pg_total_relation_size of the
// events table with its indexes, of the saga summaries and of the flow rows and tallies,
// ÷ rows). -json merges the
// figures into a JSON object file under the key "tracker", keeping the other keys and
// their order.
//
// With -prefill N it then fills a fresh index in SQL with about N records of order sagas
// as production leaves them (prefill), times the tracker calls behind sagactl console's
// pages on it against 50 ms at p99 (timeQueries), and indexes the same events on top of
// it, against the saga's rate and the empty index's (onPrefilled).
//
// With -prefill, every run (the empty indexes' too, so that prefilled ÷ empty compares
// runs on one server) goes to a Postgres cluster of the benchmark's own, sized as
// docs/tracker.md tells users to size the index's server: pg_createcluster
// (internal/testenv/pgcluster; needs root or the postgres user) with Debian's defaults
// but shared_buffers = -shared-buffers (default 2GB; at most half the memory available),
// on a free port, dropped at the end, on an error or an interrupt too. An empty
// -shared-buffers runs them on -pg's server instead, as every run without -prefill does.
// The table's first row and the JSON ("server", and its "shared_buffers" as the server
// reports it) say which server the figures come from.
//
//	go run ./bench/tracker                      # after go run ./bench/saga
//	go run ./bench/tracker -saga-rate 2200 -orders 5000 -json ''
//	go run ./bench/tracker -prefill 10000000    # as make bench runs it: on a private cluster, shared_buffers 2GB
//	go run ./bench/tracker -prefill 10000000 -shared-buffers ''   # on -pg's server as it is
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
	reference "github.com/choreo-saga/choreo/services/saga"
	"github.com/choreo-saga/choreo/tracker"
)

// eventsPerOrder is what one confirmed order of the reference saga produces: order.created,
// payment.authorized, stock.reserved, order.confirmed.
const eventsPerOrder = 4

type config struct {
	pg          string
	orders      int
	partitions  int
	sagaResults string
	sagaRate    float64
	trackerCfg  string
	jsonOut     string
	prefill     int // events to prefill an index with before the queries and one more ingest (0: none)
	queryRuns   int // times each console query runs on the prefilled index
	// sharedBuffers is the shared_buffers of the private cluster every run goes to with
	// -prefill ("": -pg's server).
	sharedBuffers string
}

// result is what -json writes under "tracker".
type result struct {
	Commit               string           `json:"commit"`
	Date                 string           `json:"date"`
	Events               int              `json:"events"`
	Partitions           int              `json:"partitions"`
	Server               string           `json:"server"`                          // where every run went: serverPrivate or serverShared
	SharedBuffers        string           `json:"shared_buffers"`                  // its shared_buffers, as SHOW reports it
	IngestEventsPerSec   float64          `json:"ingest_events_per_sec"`           // with the contract check on
	UncheckedPerSec      float64          `json:"ingest_unchecked_events_per_sec"` // the same events, the check off
	CheckedRatio         float64          `json:"checked_over_unchecked"`
	CheckedCPUPerEvent   float64          `json:"checked_cpu_us_per_event"`   // this process: tracker and in-process broker
	UncheckedCPUPerEvent float64          `json:"unchecked_cpu_us_per_event"` // the same, the check off
	Violations           int64            `json:"violations"`                 // of the reference payloads: 0
	SagaEventsPerSec     float64          `json:"saga_events_per_sec"`
	SagaRateFrom         string           `json:"saga_rate_from"`
	Ratio                float64          `json:"ratio"`
	BytesPerEvent        float64          `json:"storage_bytes_per_event"`
	TableBytesPerEvent   float64          `json:"table_bytes_per_event"`
	IndexBytesPerEvent   float64          `json:"indexes_bytes_per_event"`
	SummaryBytesPerEvent float64          `json:"summaries_bytes_per_event"`
	FlowBytesPerEvent    float64          `json:"flow_bytes_per_event"` // the flow rows and their per-minute tallies
	Prefilled            *prefilledResult `json:"prefilled,omitempty"`  // with -prefill
}

// prefilledResult is what -prefill adds: the console's queries on the prefilled index and
// the same ingest (contract check on) on top of it.
type prefilledResult struct {
	Events            int64        `json:"events"`
	Sagas             int64        `json:"sagas"`
	Stuck             int64        `json:"stuck"`
	InFlight          int64        `json:"in_flight"`
	PrefillSeconds    float64      `json:"prefill_seconds"`
	Queries           []queryTimes `json:"queries"`
	StartupSeconds    float64      `json:"startup_seconds"` // Run's start to its first indexed event (a rebuild only when the declarations changed)
	IngestPerSec      float64      `json:"ingest_events_per_sec"`
	EmptyPerSec       float64      `json:"empty_ingest_events_per_sec"` // the checked empty runs, measured the same way
	OverEmpty         float64      `json:"over_empty"`
	PrefilledOverSaga float64      `json:"ratio"` // IngestPerSec ÷ the saga's events/s
}

func main() {
	c, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		os.Exit(2) // the flag set has said why
	}
	// An interrupt cancels the runs so that the deferred clean-up (the databases, a
	// private cluster) happens; a second one ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)
	if err := run(ctx, c); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted (what it had made is dropped): %w", err)
		}
		fmt.Fprintln(os.Stderr, "bench/tracker:", err)
		os.Exit(1)
	}
}

// parseFlags parses the command line.
func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("bench/tracker", flag.ContinueOnError)
	fs.StringVar(&c.pg, "pg", benchutil.DefaultPostgresDSN(), "Postgres DSN of a database allowed to CREATE DATABASE (not used with -prefill and -shared-buffers: a private cluster)")
	fs.IntVar(&c.orders, "orders", 25_000, "order sagas to produce (4 events each)")
	fs.IntVar(&c.partitions, "partitions", 6, "partitions per topic")
	fs.StringVar(&c.sagaResults, "saga-results", "bench/results.json", "bench/saga's figures: the saturation rate is its saga.peak_confirmed_per_sec")
	fs.Float64Var(&c.sagaRate, "saga-rate", 0, "the saga's events/s at saturation, instead of reading -saga-results")
	fs.StringVar(&c.trackerCfg, "config", "deploy/tracker/order.json", "the tracker's saga declarations")
	fs.StringVar(&c.jsonOut, "json", "bench/results.json", `merge the figures into this JSON file as {"tracker": {...}} (empty: not at all)`)
	fs.IntVar(&c.prefill, "prefill", 0, "then fill an index with about this many events of order sagas (in SQL), time the console's queries on it and index the same events on top of it (0: not)")
	fs.IntVar(&c.queryRuns, "query-runs", 200, "times each console query runs on the prefilled index")
	fs.StringVar(&c.sharedBuffers, "shared-buffers", "2GB", "with -prefill: run everything (the empty indexes too) on a private Postgres cluster (pg_createcluster, needs root or the postgres user) with this shared_buffers, dropped at the end; at most half the memory available (empty: on -pg's server)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("unexpected arguments %q", fs.Args())
		fmt.Fprintln(fs.Output(), err)
		fs.Usage()
		return config{}, err
	}
	return c, nil
}

// validate checks c before anything runs.
func (c config) validate() error {
	if c.orders <= 0 || c.partitions <= 0 || c.prefill < 0 || c.prefill > 0 && c.queryRuns <= 0 {
		return errors.New("-orders, -partitions and -query-runs must be positive, -prefill not negative")
	}
	if c.privateCluster() {
		if _, err := pgBytes(c.sharedBuffers); err != nil {
			return err
		}
	}
	return nil
}

func run(ctx context.Context, c config) error {
	if err := c.validate(); err != nil {
		return err
	}
	sagaRate, from, err := sagaEventsPerSec(c)
	if err != nil {
		return err
	}
	cfg, err := tracker.LoadConfig(c.trackerCfg)
	if err != nil {
		return err
	}
	srv, err := openServer(ctx, c)
	if err != nil {
		return err
	}
	defer srv.close()
	c.pg = srv.url
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	n, err := produce(ctx, brokers, cfg.Topics, c)
	if err != nil {
		return err
	}
	fmt.Printf("tracker ingest benchmark: %d events of %d order sagas on %s (%d partitions each), GOMAXPROCS %d, in-process kfake\n",
		n, c.orders, strings.Join(cfg.Topics, ", "), c.partitions, runtime.GOMAXPROCS(0))
	fmt.Printf("Postgres: %s\n", srv.about)
	catalogue, err := reference.Contracts()
	if err != nil {
		return err
	}
	// The same events five times, each into a fresh index: a first run that warms the
	// broker's and Postgres' caches and is not counted, then without the contract check
	// and with it (as sagactl track runs by default) in the order off, on, on, off, so
	// that neither side gains from its place; the faster run and the least CPU of each
	// side count.
	if _, err := ingest(ctx, c, cfg, brokers, n, "bench-warm-up", nil); err != nil {
		return err
	}
	var unchecked, checked ingested
	var checkedRuns []ingested
	for i, on := range []bool{false, true, true, false} {
		var opts []tracker.Option
		if on {
			opts = append(opts, tracker.WithContracts(catalogue))
		}
		got, err := ingest(ctx, c, cfg, brokers, n, fmt.Sprintf("bench-%d", i), opts)
		if err != nil {
			return err
		}
		best := &unchecked
		if on {
			best = &checked
		}
		if best.elapsed == 0 || got.elapsed < best.elapsed {
			cpu := best.cpu
			*best = got
			if cpu > 0 && cpu < got.cpu {
				best.cpu = cpu
			}
		} else if got.cpu < best.cpu {
			best.cpu = got.cpu
		}
		if on {
			checkedRuns = append(checkedRuns, got)
		}
	}
	var pre *prefilledResult
	if c.prefill > 0 {
		if pre, err = onPrefilled(ctx, c, cfg, brokers, n, checkedRuns, catalogue); err != nil {
			return err
		}
		pre.PrefilledOverSaga = pre.IngestPerSec / sagaRate
	}
	total, table, summaries, rows := checked.total, checked.table, checked.summaries, checked.rows
	elapsed := checked.elapsed
	r := result{
		Commit: commit(), Date: time.Now().UTC().Format(time.RFC3339), Events: n, Partitions: c.partitions,
		Server: srv.kind, SharedBuffers: srv.sharedBuffers,
		IngestEventsPerSec: float64(n) / elapsed.Seconds(), SagaEventsPerSec: sagaRate, SagaRateFrom: from,
		UncheckedPerSec: float64(n) / unchecked.elapsed.Seconds(), Violations: checked.violations,
		BytesPerEvent: float64(total+summaries+checked.flow) / float64(rows), TableBytesPerEvent: float64(table) / float64(rows),
		IndexBytesPerEvent: float64(total-table) / float64(rows), SummaryBytesPerEvent: float64(summaries) / float64(rows),
		FlowBytesPerEvent: float64(checked.flow) / float64(rows), Prefilled: pre,
	}
	r.Ratio = r.IngestEventsPerSec / r.SagaEventsPerSec
	r.CheckedRatio = r.IngestEventsPerSec / r.UncheckedPerSec
	r.CheckedCPUPerEvent = float64(checked.cpu.Microseconds()) / float64(n)
	r.UncheckedCPUPerEvent = float64(unchecked.cpu.Microseconds()) / float64(n)
	fmt.Printf("\n| figure | value | against | ratio |\n|---|---|---|---|\n")
	fmt.Printf("| server of every row | %s, shared_buffers %s | – | – |\n", r.Server, r.SharedBuffers)
	fmt.Printf("| tracker ingest, contract check on (%d events, %s) | %.0f events/s | the saga at saturation: %.0f events/s (%s) | %.1f× |\n",
		n, elapsed.Round(time.Millisecond), r.IngestEventsPerSec, r.SagaEventsPerSec, from, r.Ratio)
	fmt.Printf("| the contract check's cost (%d violations; the faster of two runs each) | %.0f events/s on | %.0f events/s off (%s) | %.2f |\n",
		r.Violations, r.IngestEventsPerSec, r.UncheckedPerSec, unchecked.elapsed.Round(time.Millisecond), r.CheckedRatio)
	fmt.Printf("| CPU of the tracker process per event (with the broker in it) | %.1f µs on | %.1f µs off | %.2f |\n",
		r.CheckedCPUPerEvent, r.UncheckedCPUPerEvent, r.CheckedCPUPerEvent/r.UncheckedCPUPerEvent)
	fmt.Printf("| storage per indexed event | %.0f B (events table %.0f + its indexes %.0f + saga summaries %.0f + flow rows and tallies %.0f) | – | – |\n",
		r.BytesPerEvent, r.TableBytesPerEvent, r.IndexBytesPerEvent, r.SummaryBytesPerEvent, r.FlowBytesPerEvent)
	if pre != nil {
		printPrefilled(*pre, r.SagaEventsPerSec)
	}
	if r.Ratio < 10 || pre != nil && pre.PrefilledOverSaga < 10 {
		fmt.Printf("\nbelow the 10× bar\n")
	}
	if c.jsonOut != "" {
		if err := benchutil.MergeJSON(c.jsonOut, "tracker", r); err != nil {
			return err
		}
		fmt.Printf("\nwrote the figures to %s under \"tracker\"\n", c.jsonOut)
	}
	return nil
}

// ingested is one ingest run: its time, the violations counted and the index's size.
type ingested struct {
	cpu                           time.Duration // user + system time of this process (tracker and broker), not Postgres'
	elapsed                       time.Duration
	first                         time.Duration // from Run's start until the counter first showed an indexed event
	firstCount                    int64         // what it showed then
	violations                    int64
	total, table, summaries, rows int64
	flow                          int64 // the flow rows and their per-minute tallies, with their indexes
}

// ingest indexes the n events on brokers into a fresh database with a tracker of
// consumer group group and opts, and returns how long it took.
func ingest(ctx context.Context, c config, cfg tracker.Config, brokers []string, n int, group string, opts []tracker.Option) (ingested, error) {
	dsn, drop, err := benchutil.CreateDB(ctx, c.pg, "choreo_bench_tracker")
	if err != nil {
		return ingested{}, err
	}
	defer drop() //nolint:errcheck
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return ingested{}, err
	}
	defer pool.Close()
	if err := tracker.Migrate(ctx, pool, ""); err != nil {
		return ingested{}, err
	}
	return ingestInto(ctx, pool, cfg, brokers, n, group, opts)
}

// afterStartup is the rate of the run from the first indexed event on, Run's start-up
// (joining the group; rebuilding the summaries when the declarations changed) left out. A run that indexed every event
// before the counter was first read has no such rate: its whole time counts.
func (in ingested) afterStartup(n int) float64 {
	if in.firstCount >= int64(n) || in.elapsed <= in.first {
		return float64(n) / in.elapsed.Seconds()
	}
	return float64(int64(n)-in.firstCount) / (in.elapsed - in.first).Seconds()
}

// ingestInto indexes the n events on brokers into the index in pool with a tracker of
// consumer group group and opts, and returns how long it took.
func ingestInto(ctx context.Context, pool *pgxpool.Pool, cfg tracker.Config, brokers []string, n int, group string, opts []tracker.Option) (ingested, error) {
	// The tracker's own counter says how far it got, without querying the table it writes.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx) //nolint:errcheck
	tr, err := tracker.New(pool, cfg, append([]tracker.Option{tracker.WithMeter(mp.Meter("bench")), tracker.WithGroup(group)}, opts...)...)
	if err != nil {
		return ingested{}, err
	}
	defer tr.Close() //nolint:errcheck
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	start, cpuStart := time.Now(), processCPU()
	go func() { runErr <- tr.Run(rctx, brokers) }()
	var out ingested
	for indexed, since := int64(0), start; indexed < int64(n); {
		select {
		case err := <-runErr:
			return ingested{}, fmt.Errorf("tracker stopped: %w", err)
		case <-ctx.Done():
			return ingested{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if indexed, err = counter(ctx, reader, "choreo.tracker.events.indexed"); err != nil {
			return ingested{}, err
		}
		if indexed > 0 && out.first == 0 {
			out.first, out.firstCount, since = time.Since(start), indexed, time.Now()
		}
		// A start-up that rebuilds every summary of the index takes minutes on a large one.
		if limit := map[bool]time.Duration{true: 10 * time.Minute, false: time.Hour}[out.first > 0]; time.Since(since) > limit {
			return ingested{}, fmt.Errorf("only %d of %d events indexed after %s", indexed, n, limit)
		}
	}
	out.elapsed, out.cpu = time.Since(start), processCPU()-cpuStart
	cancel()
	if err := <-runErr; err != nil {
		return ingested{}, err
	}
	if out.violations, err = counter(ctx, reader, "choreo.tracker.contract.violations"); err != nil {
		return ingested{}, err
	}
	// The index is the events table with its indexes plus the per-saga summaries, the
	// producers of each type and the flow (rows and tallies), which the tracker keeps beside it.
	err = pool.QueryRow(ctx, `SELECT pg_total_relation_size($1), pg_relation_size($1),
		pg_total_relation_size($2) + pg_total_relation_size($3),
		pg_total_relation_size($4) + pg_total_relation_size($5) + pg_total_relation_size($6),
		(SELECT count(*) FROM `+tracker.DefaultTable+`)`,
		tracker.DefaultTable, tracker.DefaultTable+"_sagas", tracker.DefaultTable+"_types", tracker.DefaultTable+"_flow_events",
		tracker.DefaultTable+"_flow_edges", tracker.DefaultTable+"_flow_nodes").Scan(&out.total, &out.table, &out.summaries, &out.flow, &out.rows)
	return out, err

}

// processCPU returns the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// counter returns the value of the int64 counter name.
func counter(ctx context.Context, r *sdkmetric.ManualReader, name string) (int64, error) {
	var rm metricdata.ResourceMetrics
	if err := r.Collect(ctx, &rm); err != nil {
		return 0, err
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				var v int64
				for _, dp := range sum.DataPoints {
					v += dp.Value
				}
				return v, nil
			}
		}
	}
	return 0, nil
}

// sagaEventsPerSec returns the saga's event rate at saturation and where it comes from.
func sagaEventsPerSec(c config) (float64, string, error) {
	if c.sagaRate > 0 {
		return c.sagaRate, "-saga-rate", nil
	}
	b, err := os.ReadFile(c.sagaResults)
	if err != nil {
		return 0, "", fmt.Errorf("the saga's saturation rate: %w (run go run ./bench/saga first, or give -saga-rate)", err)
	}
	var file struct {
		Saga struct {
			Date   string  `json:"date"`
			Commit string  `json:"commit"`
			Peak   float64 `json:"peak_confirmed_per_sec"`
		} `json:"saga"`
	}
	err = json.Unmarshal(b, &file)
	s := file.Saga
	if err != nil || s.Peak <= 0 {
		return 0, "", fmt.Errorf("%s holds no saga.peak_confirmed_per_sec (%v): run go run ./bench/saga first, or give -saga-rate", c.sagaResults, err)
	}
	return s.Peak * eventsPerOrder, fmt.Sprintf("bench/saga %s at %.7s: %.1f orders/s × %d events", s.Date, s.Commit, s.Peak, eventsPerOrder), nil
}

// produce writes c.orders complete order sagas, each event on its type's topic, keyed by
// order id, and returns how many events it wrote.
func produce(ctx context.Context, brokers, topics []string, c config) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(100_000))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var all []string
	for _, t := range topics {
		all = append(all, t, t+tracker.DLQSuffix)
	}
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, int32(c.partitions), 1, nil, all...); err != nil {
		return 0, err
	}
	topicOf := map[string]string{}
	for _, t := range topics {
		switch {
		case strings.HasPrefix(t, "orders"):
			topicOf["order"] = t
		case strings.HasPrefix(t, "payments"):
			topicOf["payment"] = t
		case strings.HasPrefix(t, "inventory"):
			topicOf["inventory"] = t
		}
	}
	if len(topicOf) != 3 {
		return 0, fmt.Errorf("the config's topics %v lack the orders, payments or inventory topic", topics)
	}
	steps := [eventsPerOrder][2]string{{events.SourceOrder, events.OrderCreated}, {events.SourcePayment, events.PaymentAuthorized},
		{events.SourceInventory, events.StockReserved}, {events.SourceOrder, events.OrderConfirmed}}
	base := time.Now().Add(-time.Minute)
	var (
		mu   sync.Mutex
		errs []error
		n    int
	)
	for i := range c.orders {
		id := fmt.Sprintf("bench-%07d", i)
		tp := fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)
		var prev event.Event
		for j, s := range steps {
			ev, err := event.New(s[0], s[1], id, payload(s[1], id))
			if err != nil {
				return 0, err
			}
			ev.SchemaVersion = 1
			if j > 0 {
				ev = ev.CausedBy(prev)
			}
			ev.Time = base.Add(time.Duration(i)*time.Millisecond + time.Duration(j)*5*time.Millisecond)
			prev = ev
			r, err := event.ToRecord(topicOf[s[0]], ev)
			if err != nil {
				return 0, err
			}
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte(tp)})
			n++
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		return 0, fmt.Errorf("produce: %w", errors.Join(errs...))
	}
	return n, nil
}

// payload is a version-1 payload of typ for order id as the reference services write it,
// so that the contract check runs every schema and finds nothing to report.
func payload(typ, id string) any {
	items := []events.Item{{SKU: "sku-1", Qty: 2}}
	switch typ {
	case events.OrderCreated:
		return events.OrderCreatedV1{OrderID: id, CustomerID: "c-1", Items: items, Amount: 1999}
	case events.PaymentAuthorized:
		return events.PaymentV1{OrderID: id, CustomerID: "c-1", Amount: 1999, Items: items}
	case events.StockReserved:
		return events.StockV1{OrderID: id, Items: items}
	default:
		return events.OrderOutcomeV1{OrderID: id}
	}
}

// commit is the checked-out commit, or "" outside a git work tree.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
