package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/testenv/faultproxy"
	"github.com/choreo-saga/choreo/internal/testenv/pgcluster"
	"github.com/choreo-saga/choreo/services/events"
)

// Config is what a scenario run needs besides the scenario.
type Config struct {
	// Orders placed by sagactl load (default 2000). The overload scenario derives its own
	// count from the measured saturation, at least Orders.
	Orders int
	// Rate of orders per second (default 40).
	Rate float64
	// Seed makes the order mix and the fault schedule repeatable (default 1).
	Seed uint64
	// Bound is how long after the last fault (or the last order placed) the system has to
	// quiesce: every order terminal, outboxes empty, no consumer lag (default 3m).
	Bound time.Duration
	// Scale multiplies the number of faults of the scenarios (default 1; the smoke test
	// uses its own, smaller scenario).
	Scale float64
	// System configures the system each scenario starts.
	System Options
}

func (c *Config) defaults() {
	if c.Orders <= 0 {
		c.Orders = 2000
	}
	if c.Rate <= 0 {
		c.Rate = 40
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Bound <= 0 {
		c.Bound = 3 * time.Minute
	}
	if c.Scale <= 0 {
		c.Scale = 1
	}
}

// loadMix is the order mix of every scenario: no deliberately stuck orders (every order
// must end), a share of each outcome.
const loadMix = "success=80,decline=5,oos=5,cancel=10,stuck=0"

// Scenario is one chaos scenario: faults injected while orders flow.
type Scenario struct {
	// Name is what -scenarios selects.
	Name string
	// Doc says what the scenario does, for the report.
	Doc string
	// Faults injects the scenario's faults; ctx ends when the load generator is done
	// placing and waiting, or the run is cancelled. Faults must return within a bounded
	// time and leave every process running.
	Faults func(ctx context.Context, r *run, c Config)
	// NoDeadline adds the invariant that no order was cancelled by its saga deadline.
	NoDeadline bool
	// OwnPostgres runs the scenario on a Postgres cluster of its own (pg_createcluster on
	// a free port, dropped at the end) that its faults may crash; when one cannot be made
	// here, the scenario runs on the shared Postgres and reports why.
	OwnPostgres bool
	// Network is the path the scenario puts fault proxies on (Options.ProxyPayment or
	// ProxyBroker), for faults of the network rather than the servers; empty: none.
	Network NetPath
	// ApacheNodes runs the scenario on an Apache Kafka cluster of that many nodes
	// (Options.ApacheNodes) instead of devkafka.
	ApacheNodes int
	// overload: the load is offered at twice the measured saturation.
	overload bool
	// upgrade: the services start from the previous release (V1Release), and the
	// tracker indexes the topics for the retirement report.
	upgrade bool
	// own, if set, runs the scenario instead of Run's single system (the partitions
	// scenario starts two).
	own func(ctx context.Context, sc Scenario, c Config) Result
}

// scaled returns n×scale, at least 1.
func scaled(n int, c Config) int { return max(1, int(float64(n)*c.Scale+0.5)) }

// loadDuration is how long placing c.Orders at c.Rate takes.
func loadDuration(c Config) time.Duration {
	return time.Duration(float64(c.Orders) / c.Rate * float64(time.Second))
}

// spaced returns the Faults of a scenario that injects one fault n times (scaled by
// Config.Scale), each after a pause of 1/parts of the load's duration; d is the fault's
// duration (how long the component stays down or stopped).
func spaced(n, parts int, fault func(r *run, ctx context.Context, d time.Duration), d time.Duration) func(context.Context, *run, Config) {
	return func(ctx context.Context, r *run, c Config) {
		for range scaled(n, c) {
			sleep(ctx, loadDuration(c)/time.Duration(parts))
			fault(r, ctx, d)
		}
	}
}

// devkafkaScenarios are the scenarios of `make chaos` on devkafka, in order; [Scenarios]
// adds those on Apache Kafka.
var devkafkaScenarios = []Scenario{
	{
		Name: "kill",
		Doc:  "kill -9 of a service instance every 1–3 s (24 kills, the services in turn, 8 each; every 4th kill the outbox relay leader found through pg_locks), each restarted after 1.5 s",
		Faults: func(ctx context.Context, r *run, c Config) {
			kills := scaled(24, c)
			every := min(3*time.Second, max(time.Second, loadDuration(c)/time.Duration(kills)))
			r.killLoop(ctx, kills, every, 1500*time.Millisecond, 4)
		},
	},
	{
		Name: "postgres",
		Doc: "on a Postgres cluster of the suite's own: the payment database refuses connections and its sessions are terminated for 12 s, " +
			"then the inventory database for 12 s, then the whole cluster crashes (stop -m immediate) and restarts after 10 s",
		OwnPostgres: true,
		Faults: func(ctx context.Context, r *run, c Config) {
			sleep(ctx, loadDuration(c)/6)
			r.postgresOutage(ctx, "payment", 12*time.Second)
			sleep(ctx, loadDuration(c)/6)
			r.postgresOutage(ctx, "inventory", 12*time.Second)
			if r.cluster != nil {
				sleep(ctx, loadDuration(c)/6)
				r.postgresCrash(ctx, r.cluster, 10*time.Second)
			}
		},
	},
	{
		Name:   "redis",
		Doc:    "the suite's Redis is killed for 10 s and started again empty (locks and fences gone), twice",
		Faults: spaced(2, 4, (*run).redisOutage, 10*time.Second),
	},
	{
		Name:   "kafka",
		Doc:    "devkafka is killed with SIGKILL and restarted on its data dir after 2 s, twice",
		Faults: spaced(2, 3, (*run).kafkaRestart, 2*time.Second),
	},
	{
		Name: "duplicate",
		Doc:  "every record of the saga topics is produced a second time while the load runs, and orders.events and payments.events are replayed from offset 0",
		Faults: func(ctx context.Context, r *run, c Config) {
			var wg sync.WaitGroup
			wg.Go(func() { r.duplicateLive(ctx) })
			sleep(ctx, loadDuration(c)/2)
			r.replayTopic(ctx, events.TopicOrders)
			r.replayTopic(ctx, events.TopicPayments)
			wg.Wait()
		},
	},
	{
		Name: "poison",
		Doc:  "poison records on the saga topics: malformed JSON, unknown types, a payload over the 1 MiB limit, a 5 MB compressed payload, a reused event id with another payload, 1,000 headers",
		Faults: func(ctx context.Context, r *run, c Config) {
			sleep(ctx, loadDuration(c)/3)
			r.injectPoison(ctx)
		},
	},
	{
		Name:   "pause",
		Doc:    "a payment or inventory instance is stopped (SIGSTOP) while it handles events, for 13 s (lock TTL 10 s), then continued; three times",
		Faults: spaced(3, 5, (*run).pauseHolder, 13*time.Second),
	},
	{
		Name: "network",
		Doc: "between the payment instances and their Postgres and Redis (a fault proxy): 300 ms latency with up to 200 ms jitter for 8 s, " +
			"every connection hung for 5 s then closed, three resets 1 s apart, a 1 KB/s bandwidth cap for 6 s, a 6 s partition",
		Network: PathPaymentStores,
		Faults: func(ctx context.Context, r *run, c Config) {
			const path = PathPaymentStores
			// The faults take about 28 s; the pauses share the rest of the load.
			pause := max(time.Second, (loadDuration(c)-28*time.Second)/5)
			sleep(ctx, pause)
			r.netFault(ctx, path, "300 ms latency, 200 ms jitter", faultproxy.Faults{Latency: 300 * time.Millisecond, Jitter: 200 * time.Millisecond}, 8*time.Second)
			sleep(ctx, pause)
			r.netFault(ctx, path, "hung, then closed", faultproxy.Faults{Hung: true}, 5*time.Second)
			sleep(ctx, pause)
			r.netResets(ctx, path, 3)
			sleep(ctx, pause)
			r.netFault(ctx, path, "1 KB/s bandwidth", faultproxy.Faults{BytesPerSecond: 1 << 10}, 6*time.Second)
			sleep(ctx, pause)
			r.netFault(ctx, path, "partition", faultproxy.Faults{Down: true}, 6*time.Second)
		},
	},
	{
		Name: "network-broker",
		Doc: "between every client (services, sagactl load, the harness) and devkafka, which advertises the fault proxy's address: " +
			"200 ms latency with up to 150 ms jitter for 8 s, three resets 1 s apart, a 4 s partition, then the latency and a 4 s partition again",
		Network: PathBroker,
		Faults: func(ctx context.Context, r *run, c Config) {
			const path = PathBroker
			latency := faultproxy.Faults{Latency: 200 * time.Millisecond, Jitter: 150 * time.Millisecond}
			// The faults take about 27 s; the pauses share the rest of the load.
			pause := max(time.Second, (loadDuration(c)-27*time.Second)/5)
			sleep(ctx, pause)
			r.netFault(ctx, path, "200 ms latency, 150 ms jitter", latency, 8*time.Second)
			sleep(ctx, pause)
			r.netResets(ctx, path, 3)
			sleep(ctx, pause)
			r.netFault(ctx, path, "partition", faultproxy.Faults{Down: true}, 4*time.Second)
			sleep(ctx, pause)
			r.netFault(ctx, path, "200 ms latency, 150 ms jitter", latency, 8*time.Second)
			sleep(ctx, pause)
			r.netFault(ctx, path, "partition", faultproxy.Faults{Down: true}, 4*time.Second)
		},
	},
	{
		Name: "upgrade",
		Doc: "a rolling upgrade from the previous release, where payment.authorized has only v1, to this tree: order and inventory " +
			"instances one at a time (they then handle v2 and upcast v1), then payment's (they then write v2), so that v1 and v2 " +
			"producers and consumers run at once; a kill -9 of payment's relay leader after its first instance moved; the tracker indexes it all",
		Faults:  func(ctx context.Context, r *run, c Config) { r.rollingUpgrade(ctx, c) },
		upgrade: true,
	},
	{
		Name:        "overload",
		Doc:         "on a Postgres cluster of the suite's own: offered load at twice the saturation measured first (the most orders settled in a 5 s window while 200/s were offered), for 30 s (at least -orders orders), then nothing",
		NoDeadline:  true,
		OwnPostgres: true,
		overload:    true,
	},
}

// Result is the outcome of one scenario run.
type Result struct {
	Scenario string  `json:"scenario"`
	Doc      string  `json:"doc"`
	Seed     uint64  `json:"seed"`
	Commit   string  `json:"commit,omitempty"`
	Rate     float64 `json:"rate"`
	// Saturation is the overload scenario's measured confirmed orders/s.
	Saturation float64 `json:"saturation,omitempty"`
	// Orders is the number of orders in the order database; Placed what load placed.
	Orders        int            `json:"orders"`
	Placed        int            `json:"placed"`
	FailedToPlace int            `json:"failed_to_place"`
	Faults        []Fault        `json:"faults"`
	FaultCounts   map[string]int `json:"fault_counts"`
	Poison        []poisonRecord `json:"poison,omitempty"`
	Duplicates    int            `json:"duplicates,omitempty"`
	// Quiesced is whether the system quiesced within the bound; Quiescence is the time
	// from the end of the last fault (or of the load) to quiescence.
	Quiesced   bool          `json:"quiesced"`
	Quiescence time.Duration `json:"quiescence_ns"`
	Progress   string        `json:"progress_at_check"`
	Load       *LoadSummary  `json:"load,omitempty"`
	Anomalies  []Anomaly     `json:"anomalies"`
	// DeadLetters is the number of records in the saga topics' .dlq topics at the check
	// (the poison scenarios expect theirs; any other is an anomaly too).
	DeadLetters int `json:"dead_letters"`
	// Versions counts payment.authorized records by schema version, and Retirement is
	// what `sagactl contracts usage -retire payment.authorized@1` printed after the run
	// (the upgrade scenario).
	Versions   map[string]int `json:"versions,omitempty"`
	Retirement string         `json:"retirement,omitempty"`
	Started    time.Time      `json:"started"`
	Took       time.Duration  `json:"took_ns"`
	Logs       string         `json:"logs,omitempty"`
	Err        string         `json:"error,omitempty"`

	// Figures are measured figures judged against their limits (the partitions
	// scenario); one outside its limit is an anomaly too.
	Figures []Figure `json:"figures,omitempty"`
}

// OK reports whether the scenario ran and found no anomaly.
func (r Result) OK() bool { return r.Err == "" && len(r.Anomalies) == 0 }

// LoadSummary is the part of `sagactl load -json` the report uses.
type LoadSummary struct {
	Placed        int     `json:"placed"`
	FailedToPlace int     `json:"failed_to_place"`
	Shed          int     `json:"shed"` // answered 503 by the order API's admission control
	Settled       int     `json:"settled"`
	PlaceSeconds  float64 `json:"place_seconds"`
	SettleSeconds float64 `json:"settle_seconds"`
	Latency       struct {
		N     int     `json:"n"`
		P50ms float64 `json:"p50_ms"`
		P99ms float64 `json:"p99_ms"`
	} `json:"latency"`
}

// Run runs one scenario against a fresh system and checks the invariants. The error is
// for a run that could not be made (the system did not start); anomalies are in the
// Result.
func Run(ctx context.Context, sc Scenario, c Config) (res Result) {
	c.defaults()
	if sc.own != nil {
		return sc.own(ctx, sc, c)
	}
	res = Result{Scenario: sc.Name, Doc: sc.Doc, Seed: c.Seed, Rate: c.Rate, Started: time.Now(), FaultCounts: map[string]int{}, Anomalies: []Anomaly{}}
	defer func() { res.Took = time.Since(res.Started) }()
	fail := func(err error) Result { res.Err = err.Error(); return res }

	var cluster *pgcluster.Cluster
	if sc.OwnPostgres {
		var idb [4]byte
		_, _ = rand.Read(idb[:])
		cl, err := createCluster(ctx, hex.EncodeToString(idb[:]))
		if err != nil {
			fmt.Fprintf(c.System.Log, "chaos: no Postgres cluster of its own, the shared one is used: %v\n", err)
		} else {
			cluster = cl
			defer cl.Drop() // after the system stopped (defers run last first)
			c.System.PostgresURL = cl.URL()
		}
	}
	if sc.ApacheNodes > 0 {
		c.System.ApacheNodes = sc.ApacheNodes
	}
	if sc.upgrade {
		dir, err := os.MkdirTemp("", "choreo-release-")
		if err != nil {
			return fail(err)
		}
		defer os.RemoveAll(dir)
		if c.System.ServiceBins, err = BuildRelease(ctx, dir, V1Release); err != nil {
			return fail(err)
		}
	}
	switch sc.Network {
	case PathPaymentStores:
		c.System.ProxyPayment = true
	case PathBroker:
		c.System.ProxyBroker = true
	}
	s, err := Start(ctx, c.System)
	if err != nil {
		return fail(err)
	}
	defer s.Close()
	if c.System.KeepDir || c.System.Dir != "" {
		res.Logs = filepath.Join(s.Dir(), "logs")
	}
	r := newRun(s, c.Seed)
	r.cluster = cluster
	if sc.upgrade {
		if err := s.startTracker(ctx); err != nil {
			return fail(err)
		}
	}
	s.logf("scenario %s: %s", sc.Name, sc.Doc)

	if sc.overload {
		sat, err := s.saturation(ctx, c)
		if err != nil {
			return fail(err)
		}
		res.Saturation = sat
		c.Rate = 2 * sat
		c.Orders = max(c.Orders, int(60*sat))
		res.Rate = c.Rate
		s.logf("saturation %.1f orders/s: offering %d orders at %.1f/s", sat, c.Orders, c.Rate)
	}

	// The load and the faults run together; the faults' context ends when the load does.
	loadCtx, loadDone := context.WithCancel(ctx)
	var (
		wg      sync.WaitGroup
		sum     *LoadSummary
		loadErr error
	)
	loadStart := time.Now()
	wg.Go(func() {
		defer loadDone()
		sum, loadErr = s.load(ctx, c.Orders, c.Rate, c.Seed, c.Bound)
	})
	if sc.Faults != nil {
		sc.Faults(loadCtx, r, c)
	}
	wg.Wait()
	placed := time.Now() // when the last order was placed
	res.Load = sum
	if sum != nil {
		res.Placed, res.FailedToPlace = sum.Placed, sum.FailedToPlace
		placed = loadStart.Add(time.Duration(sum.PlaceSeconds * float64(time.Second)))
	}
	if sc.overload {
		r.mu.Lock()
		r.faults = append(r.faults, Fault{At: loadStart.Sub(r.start), Took: placed.Sub(loadStart), Kind: FaultOverload,
			Target: "order API", Detail: fmt.Sprintf("%d orders offered at %.1f/s", c.Orders, c.Rate)})
		r.mu.Unlock()
	}
	if loadErr != nil {
		s.logf("load: %v", loadErr)
	}
	if ctx.Err() != nil {
		return fail(ctx.Err())
	}

	// Quiescence: bounded from the end of the last fault or of the load, whichever is later.
	r.mu.Lock()
	from := placed
	if r.lastFault.After(from) {
		from = r.lastFault
	}
	r.mu.Unlock()
	quiet, took, prog := s.quiesce(ctx, from, c.Bound)
	res.Quiesced, res.Quiescence, res.Progress = quiet, took, prog.String()
	res.Orders = prog.orders
	s.logf("quiescence: %v after %s (%s)", quiet, took.Round(100*time.Millisecond), prog)

	r.mu.Lock()
	res.Faults = append([]Fault(nil), r.faults...)
	res.Poison = append([]poisonRecord(nil), r.poison...)
	res.Duplicates = r.dups
	r.mu.Unlock()
	for _, f := range res.Faults {
		res.FaultCounts[f.Kind]++
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var deadlineSince time.Time // zero: the invariant does not apply
	if sc.NoDeadline {
		deadlineSince = loadStart
	}
	anomalies, dlq, err := s.check(cctx, res.Poison, deadlineSince)
	if err != nil {
		return fail(err)
	}
	if prog.lag > 0 {
		anomalies = append(anomalies, Anomaly{Invariant: "every event consumed", Detail: fmt.Sprintf("consumer lag %d at the end", prog.lag)})
	}
	if sc.upgrade {
		seen, as, err := s.versionsSeen(cctx)
		if err != nil {
			return fail(err)
		}
		res.Versions, anomalies = seen, append(anomalies, as...)
		r.mu.Lock()
		upgraded := r.upgraded
		r.mu.Unlock()
		if res.Retirement, err = s.retirement(cctx, upgraded); err != nil {
			return fail(err)
		}
		s.logf("retirement report:\n%s", res.Retirement)
	}
	res.Anomalies, res.DeadLetters = anomalies, dlq
	if len(anomalies) > 0 {
		s.logf("scenario %s: %d anomalies", sc.Name, len(anomalies))
	}
	return res
}

// quiesce waits until the system is quiet (no open order, empty outboxes, no lag) or
// bound after from passed; it returns whether it quiesced, when (after from), and the
// last progress.
func (s *System) quiesce(ctx context.Context, from time.Time, bound time.Duration) (bool, time.Duration, progress) {
	pools := map[string]*pgxpool.Pool{}
	for _, svc := range services {
		p, err := s.pool(ctx, svc)
		if err != nil {
			return false, time.Since(from), progress{}
		}
		defer p.Close()
		pools[svc] = p
	}
	var last progress
	lastLog := time.Now()
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		p, err := s.progress(pctx, pools)
		cancel()
		if err == nil {
			last = p
			if p.quiet() {
				return true, max(0, time.Since(from)), p
			}
		}
		if time.Since(lastLog) > 10*time.Second {
			s.logf("waiting for quiescence: %s (err %v)", last, err)
			lastLog = time.Now()
		}
		if time.Since(from) > bound || ctx.Err() != nil {
			return false, time.Since(from), last
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

// load runs sagactl load against the system and returns its summary. Its own exit code
// is not the suite's verdict (the invariants are); it fails only when it produced no
// summary.
func (s *System) load(ctx context.Context, n int, rate float64, seed uint64, wait time.Duration) (*LoadSummary, error) {
	args := []string{"load", "-n", strconv.Itoa(n), "-rate", strconv.FormatFloat(rate, 'f', -1, 64),
		"-seed", strconv.FormatUint(seed, 10), "-mix", loadMix, "-skus", skus, "-wait", wait.String(),
		"-wait-stuck=false", "-poll", "1s", "-concurrency", "32", "-json",
		"-order-url", s.OrderURL(), "-brokers", s.brokers}
	placing := time.Duration(float64(n) / rate * float64(time.Second))
	cctx, cancel := context.WithTimeout(ctx, placing+wait+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, filepath.Join(s.bins, "sagactl"), args...)
	var out bytes.Buffer
	logf, err := os.OpenFile(s.logPath("sagactl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, logf), logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	runErr := cmd.Run()
	var sum LoadSummary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		return nil, fmt.Errorf("chaos: sagactl load: %w (no summary: %v)", runErr, err)
	}
	var ee *exec.ExitError
	if runErr != nil && !errors.As(runErr, &ee) {
		return &sum, fmt.Errorf("chaos: sagactl load: %w", runErr)
	}
	return &sum, nil
}

// skus are the stocked SKUs orders draw from (the inventory service's default seed).
const skus = "sku-1,sku-2,sku-3,sku-4,sku-5,sku-6,sku-7,sku-8,sku-9,sku-10,sku-11,sku-12,sku-13,sku-14,sku-15,sku-16,sku-17,sku-18,sku-19,sku-20"

// saturation measures how many orders per second the system settles at most when
// offered more than it can take: 10 s of load at 200 orders/s, then the highest number of
// orders that reached their final state within one 5-second window, per second, read from
// the order database. (Settled orders over the whole time to settle them would measure
// the throughput of a collapsing system, not its capacity.)
func (s *System) saturation(ctx context.Context, c Config) (float64, error) {
	if _, err := s.load(ctx, 2000, 200, c.Seed+1, c.Bound); err != nil {
		return 0, fmt.Errorf("chaos: measure saturation: %w", err)
	}
	// The calibration orders must be out of the way before the measured run starts.
	quiet, _, prog := s.quiesce(ctx, time.Now(), c.Bound)
	if !quiet {
		return 0, fmt.Errorf("chaos: measure saturation: the system did not quiesce after calibration (%s)", prog)
	}
	p, err := s.pool(ctx, "order")
	if err != nil {
		return 0, err
	}
	defer p.Close()
	var peak int64
	if err := p.QueryRow(ctx, `SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM orders
		WHERE state IN ('CONFIRMED', 'REJECTED', 'CANCELLED', 'COMPENSATION_FAILED')
		GROUP BY floor(extract(epoch FROM state_since) / 5)) w`).Scan(&peak); err != nil {
		return 0, fmt.Errorf("chaos: measure saturation: %w", err)
	}
	if peak == 0 {
		return 0, errors.New("chaos: measure saturation: nothing settled")
	}
	return float64(peak) / 5, nil
}
