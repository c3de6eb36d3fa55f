// Command chaos runs the chaos suite of package chaos against the reference system: for
// each scenario it starts devkafka (a 3-node Apache Kafka cluster for the broker-*
// scenarios), a Redis of its own, two instances of each service on
// databases of their own in the shared Postgres, drives orders with `sagactl load`,
// injects the scenario's faults, waits for the system to quiesce and checks the
// invariants from the databases and topics. It prints the anomalies with their order ids
// and exits 1 when a scenario found any (2 for a usage error).
//
//	go run ./cmd/chaos                               # every scenario, 2,000 orders each
//	go run ./cmd/chaos -scenarios kill,poison -orders 500 -seed 7
//	go run ./cmd/chaos -json -report chaos-report.md
//	go run ./cmd/chaos -scenarios partitions       # by name only: not in "all" (make chaos-partitions; pgbouncer: make chaos-pgbouncer)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/choreo-saga/choreo/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		names    = fs.String("scenarios", "all", "comma-separated `scenarios` to run: "+strings.Join(scenarioNames(), ", ")+", or all")
		orders   = fs.Int("orders", 2000, "orders per scenario (the overload scenario offers at least this many)")
		rate     = fs.Float64("rate", 40, "orders per second placed by sagactl load")
		seed     = fs.Uint64("seed", 1, "seed of the order mix and the fault schedule")
		bound    = fs.Duration("bound", 3*time.Minute, "how long after the last fault the system has to quiesce")
		asJSON   = fs.Bool("json", false, "print the results as JSON instead of text")
		report   = fs.String("report", "", "also write the results as Markdown tables, one per scenario, to `file`")
		keepLogs = fs.Bool("keep-logs", false, "keep each scenario's working directory (process logs) instead of removing it")
		inst     = fs.Int("instances", 0, "instances of each service (0: the scenario's own, 2; partitions and pgbouncer: 4)")
		parts    = fs.Int("partitions", 0, "partitions of every topic (0: the scenario's own, 6; partitions: its larger count, 64, compared with 8)")
		quiet    = fs.Bool("q", false, "no progress lines on stderr")
	)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	var selected []chaos.Scenario
	known := chaos.Scenarios // "all"; chaos.Extra only by name
	if *names != "all" {
		known = slices.Concat(chaos.Scenarios, chaos.Extra)
	}
	for _, sc := range known {
		if *names == "all" || slices.Contains(strings.Split(*names, ","), sc.Name) {
			selected = append(selected, sc)
		}
	}
	for _, n := range strings.Split(*names, ",") {
		if n != "all" && !slices.Contains(scenarioNames(), n) {
			fmt.Fprintf(stderr, "chaos: unknown scenario %q (known: %s)\n", n, strings.Join(scenarioNames(), ", "))
			return 2
		}
	}
	logw := stderr
	if *quiet {
		logw = io.Discard
	}
	dir, err := os.MkdirTemp("", "choreo-chaos-bin-")
	if err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	fmt.Fprintln(logw, "chaos: building the binaries")
	bins, err := chaos.Build(ctx, dir)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	commit := gitCommit(ctx)
	var results []chaos.Result
	for _, sc := range selected {
		cfg := chaos.Config{Orders: *orders, Rate: *rate, Seed: *seed, Bound: *bound,
			System: chaos.Options{Log: logw, Bins: bins, KeepDir: *keepLogs, Instances: *inst, Partitions: *parts}}
		res := chaos.Run(ctx, sc, cfg)
		res.Commit = commit
		results = append(results, res)
		if !*asJSON {
			chaos.WriteText(stdout, []chaos.Result{res})
		}
		if ctx.Err() != nil {
			break
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			fmt.Fprintf(stderr, "chaos: %v\n", err)
			return 1
		}
	}
	if *report != "" {
		f, err := os.Create(*report)
		if err != nil {
			fmt.Fprintf(stderr, "chaos: %v\n", err)
			return 1
		}
		chaos.WriteMarkdown(f, results)
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "chaos: %v\n", err)
			return 1
		}
	}
	failed := 0
	for _, r := range results {
		if !r.OK() {
			failed++
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "chaos: interrupted; every process was stopped")
		return 1
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "chaos: %d of %d scenario(s) found anomalies or could not run\n", failed, len(results))
		return 1
	}
	fmt.Fprintf(stderr, "chaos: %d scenario(s), no anomaly\n", len(results))
	return 0
}

func scenarioNames() []string {
	var out []string
	for _, sc := range slices.Concat(chaos.Scenarios, chaos.Extra) {
		out = append(out, sc.Name)
	}
	return out
}

// gitCommit is the short commit of the working tree, with "+dirty" when it has changes.
func gitCommit(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += "+dirty"
	}
	return c
}
