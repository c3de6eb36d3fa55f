// Command soak is the long-run benchmark of issue #45 item 1: it measures the saga's
// saturation rate at the start of the run (bench/saga's method, by running it), then runs
// the reference system's three services (chaos.Start, as processes, with devkafka and a
// Redis of their own) and the tracker (sagactl track) at half that rate for -duration,
// with the retention windows shortened to -retention through the services' environment
// (IDEMPOTENCY_RETENTION, DEAD_LETTER_RETENTION) and the tracker's -retention flag.
//
// Every -sample it records each process's RSS, pg_total_relation_size and n_dead_tup of
// every table of every service database and of the tracker's, and orders offered and
// confirmed; POST→terminal latency (terminal as read from orders.events) is bucketed per
// minute of the order's due time. It judges: RSS slope per process after warm-up
// (least-squares, MiB/hour) ≤ 2; each table's size at the end ≤ 1.1× its size when the
// retention window was first reached; p99 of the last 10 minutes ÷ p99 of minutes 5–15 ≤
// 1.25 (both windows scaled by duration/60m for shorter runs); confirmed = offered. It
// writes the samples and verdicts to the "soak" key of -json and a plot to -svg.
//
// With -hold (issue #45 item 3) it holds, from -hold-at for -hold, a REPEATABLE READ
// transaction idle after its first query on each service database and the tracker's, so
// that vacuum cannot remove the dead rows of that time (hold.go), and judges confirmed
// orders/s and p99 POST→terminal latency during it ÷ before it (after warm-up) ≥ 0.8 and
// ≤ 2, and from a minute after the release to the end ≥ 0.95 and ≤ 1.25 (holdjudge.go),
// reporting each table's n_dead_tup and size at the hold, the release and the end. The
// RSS, table size and p99 drift figures are then reported but not judged, and the
// results go to the "soak_hold" key and docs/soak-hold.svg. To show what makes the hold
// cost (activity.go, statements.go) it samples pg_stat_activity every -activity (the
// active backends and autovacuum workers per window, and per wait event and query, the hold's first and last
// thirds apart) and, when pg_stat_statements is loaded, reports the statements that took
// the most time in the hold's last third, per call then and before the hold.
//
// Without -hold, the same observer reports the p99 drift's windows: the active backends
// in each (and per minute), and the statements of the last window against the early one
// (the "drift" part of the results).
//
// With -profiles it saves each service's heap profile at the end of warm-up and at the
// end of the load into that directory (heap.go) and prints their heap in use.
//
//	go run ./bench/soak                       # 60 minutes
//	go run ./bench/soak -duration 10m         # make soak SOAK_MINUTES=10
//	go run ./bench/soak -duration 17m -hold-at 5m -hold 10m -profiles /tmp/soak-prof   # make soak-hold
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type config struct {
	duration   time.Duration
	sample     time.Duration
	retention  time.Duration
	warmup     time.Duration
	satRates   string
	satDur     time.Duration
	rate       int
	jsonPath   string
	svgPath    string
	holdAt     time.Duration
	hold       time.Duration
	profiles   string
	activity   time.Duration
	dir        string
	ordersPath string
	maxConns   int
}

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		fmt.Fprintln(os.Stderr, "soak: stopping on", sig)
		cancel()
	}()
	var c config
	fs := flag.NewFlagSet("soak", flag.ExitOnError)
	fs.DurationVar(&c.duration, "duration", 60*time.Minute, "how long half the saturation rate is offered")
	fs.DurationVar(&c.sample, "sample", 15*time.Second, "sampling period of RSS, table sizes and counts")
	fs.DurationVar(&c.retention, "retention", 2*time.Minute, "retention window of idempotency records, dead letters and tracker events during the soak")
	fs.DurationVar(&c.warmup, "warmup", 0, "RSS samples before this are left out of the slope (0: duration/6)")
	fs.StringVar(&c.satRates, "sat-rates", "100,200,400", "offered rates of the saturation measurement (bench/saga -rates)")
	fs.DurationVar(&c.satDur, "sat-duration", 10*time.Second, "how long each saturation rate is offered")
	fs.IntVar(&c.rate, "rate", 0, "offer this rate instead of measuring the saturation (0: measure)")
	fs.StringVar(&c.jsonPath, "json", "bench/results.json", "write the samples and verdicts to the \"soak\" key (\"soak_hold\" with -hold) of this file (empty: not at all)")
	fs.StringVar(&c.svgPath, "svg", "docs/soak.svg", "write the plot to this file (empty: not at all; docs/soak-hold.svg by default with -hold)")
	fs.DurationVar(&c.holdAt, "hold-at", 5*time.Minute, "with -hold, when the snapshots are taken, after the warm-up")
	fs.DurationVar(&c.hold, "hold", 0, "hold a REPEATABLE READ snapshot on every service database this long (0: no hold)")
	fs.DurationVar(&c.activity, "activity", 500*time.Millisecond, "sample the active backends and autovacuum workers of the soak's databases this often (0: not at all)")
	fs.StringVar(&c.profiles, "profiles", "", "save each service's heap profile at the end of warm-up and of the load into this directory (empty: not at all)")
	fs.IntVar(&c.maxConns, "max-conns", -1, "DATABASE_MAX_CONNS of every service (negative: each service's own default, as docs/operations.md sizes it)")
	fs.StringVar(&c.dir, "dir", "", "keep the system's binaries, broker data and logs in this directory (empty: a temporary one, removed)")
	fs.StringVar(&c.ordersPath, "orders", "", "write every order's due, answered and terminal times (CSV) to this file (empty: not at all)")
	_ = fs.Parse(os.Args[1:])
	if c.warmup == 0 {
		c.warmup = c.duration / 6
	}
	key := "soak"
	if c.hold > 0 {
		key = "soak_hold"
		svgSet := false
		fs.Visit(func(f *flag.Flag) { svgSet = svgSet || f.Name == "svg" })
		if !svgSet {
			c.svgPath = "docs/soak-hold.svg"
		}
		if err := c.checkHold(); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(2)
		}
	}
	res, err := run(ctx, c)
	if res != nil {
		printResults(os.Stdout, res)
		if c.jsonPath != "" {
			if werr := writeJSON(c.jsonPath, key, res); werr != nil && err == nil {
				err = werr
			}
		}
		if c.svgPath != "" {
			if werr := os.WriteFile(c.svgPath, plotSVG(res), 0o644); werr != nil && err == nil {
				err = fmt.Errorf("soak: %w", werr)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// checkHold requires a hold that starts after the warm-up and ends at least two minutes
// before the load does, so that every window it is judged on has orders.
func (c config) checkHold() error {
	if c.holdAt <= c.warmup {
		return fmt.Errorf("-hold-at %s must be after the warm-up (-warmup, default duration/6: %s)", c.holdAt, c.warmup)
	}
	if c.holdAt+c.hold+2*time.Minute > c.duration {
		return fmt.Errorf("-hold-at %s + -hold %s leaves less than the 2 minutes after the release the recovery is judged on (-duration %s)",
			c.holdAt, c.hold, c.duration)
	}
	return nil
}
