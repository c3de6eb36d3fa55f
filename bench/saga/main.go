// Command saga is the whole-saga benchmark: the reference system's three services as
// separate processes (as `make demo` starts them) with cmd/devkafka, a Redis of its own
// and fresh databases in the local Postgres, driven by an open-loop load generator at
// fixed offered rates. Settlement is learnt only from the order service's terminal
// events on orders.events, never by asking the services about an order.
//
// Per rate it prints offered and sent orders/s, confirmed/s, POST→terminal latency
// percentiles, orders unsettled after a bounded drain, CPU (% of one core) and peak RSS
// per service, the CPU of the Postgres backends serving each service, the generator's
// own CPU, and the most frequent pg_stat_activity states/wait events per service
// (sampled every 100 ms). It writes every figure to -json and a plot of confirmed/s and
// latency against offered load to -svg.
//
//	go run ./bench/saga                                  # 50,100,200,400,800,1600 orders/s, 20 s each
//	go run ./bench/saga -rates 100,400 -duration 10s -instances 2
//	go run ./bench/saga -rates 400 -profile-dir /tmp/prof # also a 10 s CPU profile per service
//	go run ./bench/saga -rates 800 -profile-dir /tmp/tr -profile-trace # an execution trace instead
//	go run ./bench/saga -rates 100 -env CONSUMER_BATCH=1  # a service setting changed
//	go run ./bench/saga -statements -sweep 1,2,4         # also the SQL replay and the cost per order with 1, 2, 4 instances
//	go run ./bench/saga -replot bench/results.json        # tables and plot of an earlier run
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
)

// config is the command line.
type config struct {
	kafkas      []string // -kafka: the brokers to run on, in turn: devkafka, apache
	apache      bool     // this run's system is on a one-node Apache Kafka (chaos.Options.ApacheNodes)
	bins        string   // binaries built already (chaos.Build); empty: each system builds them
	rates       []int
	duration    time.Duration
	warmup      time.Duration
	drain       time.Duration
	instances   int
	partitions  int
	maxInFlight int
	minConns    int
	jsonPath    string
	svgPath     string
	profileDir  string
	statements  bool
	// half offers half the saturation rate after the rates (the tail there); record and
	// replayTime are -statements' recording and each service's pgbench replay; replayDir
	// keeps the scripts.
	half       bool
	record     time.Duration
	replayTime time.Duration
	replayDir  string
	// sweep lists instance counts whose cost per order is measured at sweepRate (0: half
	// the saturation rate) on topics of sweepPartitions partitions.
	sweep           []int
	sweepRate       int
	sweepPartitions int
	profileRate     int
	// profileTrace fetches execution traces instead of CPU profiles.
	profileTrace bool
	seed         uint64
	env          []string
	replot       string
	cpuProfile   string
	log          io.Writer
}

// envFlags collects repeated -env KEY=VALUE flags.
type envFlags []string

func (e *envFlags) String() string { return fmt.Sprint(*e) }

func (e *envFlags) Set(v string) error {
	if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", v)
	}
	*e = append(*e, v)
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "saga:", err)
		os.Exit(2)
	}
	cfg.log = os.Stderr
	if cfg.replot != "" {
		err := replot(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "saga:", err)
			os.Exit(1)
		}
		return
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "saga:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	var peaks []string
	for i, kind := range cfg.kafkas {
		one := cfg
		one.apache = kind == "apache"
		if i > 0 { // the first broker's run writes the results file and the plot
			one.jsonPath, one.svgPath = "", ""
		}
		fmt.Fprintf(os.Stdout, "saga: on %s\n", kind)
		res, err := run(ctx, one)
		if res != nil {
			printResults(os.Stdout, res)
			peaks = append(peaks, fmt.Sprintf("%s %.1f confirmed/s (at %d/s offered)", kind, res.PeakConfirmedPerSec, res.PeakAtOffered))
		}
		if err != nil {
			pprof.StopCPUProfile()
			fmt.Fprintln(os.Stderr, "saga:", err)
			os.Exit(1)
		}
	}
	if len(peaks) > 1 {
		fmt.Fprintf(os.Stdout, "saturation by broker, one invocation: %s\n", strings.Join(peaks, "; "))
	}
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("saga", flag.ContinueOnError)
	kafkas := fs.String("kafka", "devkafka", "the brokers to run the whole system on, in turn, comma-separated: devkafka, apache (a one-node Apache Kafka 4.4.0 from scripts/kafka.sh; needs Java 17+ and Maven)")
	rates := fs.String("rates", "50,100,200,400,800,1600", "offered `rates` in orders/s, comma-separated, run in this order")
	fs.DurationVar(&c.duration, "duration", 20*time.Second, "how long each rate is offered")
	fs.DurationVar(&c.warmup, "warmup", 5*time.Second, "before the first rate, offer 20 orders/s (or the first rate if lower) for this long, unmeasured: pools, prepared statements and consumer groups settle (0: none)")
	fs.DurationVar(&c.drain, "drain", 30*time.Second, "after each rate, wait at most this long for its orders to settle")
	fs.IntVar(&c.instances, "instances", 1, "processes of each service")
	fs.IntVar(&c.partitions, "partitions", 6, "partitions of every topic (make demo: 6)")
	fs.IntVar(&c.minConns, "min-conns", 16, "Postgres connections each service opens before it is ready (DATABASE_MIN_CONNS, as make demo), divided among the -instances so that warm pools stay below max_connections; 0: none")
	fs.IntVar(&c.maxInFlight, "max-in-flight", 4096, "POST requests in flight at most; beyond, the generator falls behind its schedule (reported)")
	fs.StringVar(&c.jsonPath, "json", "bench/results.json", "write every figure to this `file` (empty: not at all)")
	fs.StringVar(&c.svgPath, "svg", "docs/benchmarks-saga.svg", "write the plot to this `file` (empty: not at all)")
	fs.BoolVar(&c.statements, "statements", false, "run on a private Postgres cluster with pg_stat_statements (made and dropped by the run), report every statement per order created, and after the rates record every statement with its parameters at the offered rate of the peak and replay them with pgbench (the saga against its own SQL)")
	fs.BoolVar(&c.half, "half", true, "after the rates, offer half the peak confirmed/s for -duration: the tail at half saturation")
	fs.DurationVar(&c.record, "record", 10*time.Second, "with -statements, how long the recorded rate is offered")
	fs.DurationVar(&c.replayTime, "replay-time", 10*time.Second, "with -statements, how long pgbench replays each service's transactions")
	fs.StringVar(&c.replayDir, "replay-dir", "", "with -statements, keep the generated pgbench scripts in this `dir`")
	sweep := fs.String("sweep", "", "instance counts (e.g. 1,2,4): after the rates, a fresh system of each offered -sweep-rate for -duration, to compare CPU per order (empty: none)")
	fs.IntVar(&c.sweepRate, "sweep-rate", 0, "offered rate of -sweep (0: half the peak confirmed/s)")
	fs.IntVar(&c.sweepPartitions, "sweep-partitions", 8, "partitions of every topic in -sweep")
	fs.StringVar(&c.profileDir, "profile-dir", "", "if set, run the services with PPROF=1 and save a 10 s CPU profile of each into this `dir` during -profile-rate")
	fs.BoolVar(&c.profileTrace, "profile-trace", false, "with -profile-dir, save a 10 s execution trace of each service (/debug/pprof/trace) instead of a CPU profile: read it with go tool trace, e.g. -pprof=net or -pprof=sync for where goroutines wait and how often")
	fs.IntVar(&c.profileRate, "profile-rate", 0, "the offered rate during which the profiles are taken (default: the highest)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the orders' customers, SKUs and amounts")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the harness itself (the load generator, the Kafka reader, the samplers) to this `file`")
	fs.StringVar(&c.replot, "replot", "", "run nothing: read the results `file` of an earlier run, print its tables and write -svg")
	var env envFlags
	fs.Var(&env, "env", "extra `KEY=VALUE` for every service process (repeatable), e.g. -env CONSUMER_BATCH=1")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.env = env
	for _, k := range strings.Split(*kafkas, ",") {
		if k != "devkafka" && k != "apache" {
			return c, fmt.Errorf("-kafka %q: want devkafka or apache", k)
		}
		c.kafkas = append(c.kafkas, k)
	}
	var err error
	if c.rates, err = benchutil.ParseInts(*rates, 1); err != nil {
		return c, err
	}
	if *sweep != "" {
		if c.sweep, err = benchutil.ParseInts(*sweep, 1); err != nil {
			return c, err
		}
	}
	switch {
	case c.duration <= 0 || c.drain < 0 || c.warmup < 0:
		return c, fmt.Errorf("-duration must be > 0, -drain and -warmup >= 0")
	case c.instances < 1 || c.partitions < 1 || c.maxInFlight < 1:
		return c, fmt.Errorf("-instances, -partitions and -max-in-flight must be >= 1")
	case c.minConns < 0:
		return c, fmt.Errorf("-min-conns must be >= 0")
	}
	if c.profileRate == 0 {
		for _, r := range c.rates {
			c.profileRate = max(c.profileRate, r)
		}
	}
	return c, nil
}

// replot prints the tables of an earlier run's results and draws its plot again.
func replot(cfg config) error {
	b, err := os.ReadFile(cfg.replot)
	if err != nil {
		return err
	}
	var file struct {
		Saga results `json:"saga"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		return fmt.Errorf("%s: %w", cfg.replot, err)
	}
	res := file.Saga
	printResults(os.Stdout, &res)
	if cfg.svgPath == "" {
		return nil
	}
	return os.WriteFile(cfg.svgPath, plotSVG(&res), 0o644)
}
