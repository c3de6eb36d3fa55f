// Command hotentity measures the library on hot entities against a hand-written pipeline
// doing the same work, and against pgbench running the same transaction, in one run.
//
//	go run ./bench/hotentity [-events 20000] [-partitions 12] [-accounts 1000] [-dup 0.05] [-batch 16,64] [-atcommit=true] [-signed=true] [-unfenced=true] [-processes 1,2] [-repeat 3]
//
// The work, per input event: consume → lock the account (Redis) → one transaction: dedup
// + one UPDATE of the account's balance + one outbox insert → relay the outgoing event to
// the next topic. The input topic is loaded once with -events records on -partitions
// partitions, keyed by -accounts accounts drawn uniformly (so an account repeats inside its
// partition), a -dup fraction of them duplicates (an exact copy of an earlier record:
// same id, key and payload).
//
// Modes, each consuming the whole input in a fresh consumer group from the same state
// (dedup, idempotency, fence and outbox tables emptied, balances 0), timed from the start
// of the pipeline until the relay has had every unique event's output record acknowledged:
//
//   - hand-written: franz-go + pgx + redislock, written the straightforward way (see
//     handWritten): one goroutine per partition, redislock.Obtain per record, one
//     transaction per record, marks committed by AutoCommitMarks, and a relay loop that
//     produces up to 1000 rows, waits for the acks and deletes them. This is the floor.
//   - choreo: consumer.Standard (Locker lock.New, Fence, AfterCommit ob.Wake; the
//     idempotency claim is its dedup), one event per transaction, and an outbox.Relay
//     sharing the writers' outbox.Outbox.
//   - choreo/signed (Ed25519): choreo with event signing on (-signed, on by default): the
//     outbox signs every outgoing event (outbox.WithSigner) and the consumer verifies the
//     signature of every input event (StandardConfig.TrustedKeys; the input is signed in
//     every mode, and the other modes ignore the header). It runs right after choreo in
//     each round, so the two form an interleaved pair per round: the difference is the
//     cost of signing one event and verifying one.
//   - choreo/unfenced: choreo without the fence check (StandardConfig.Fence false; -unfenced,
//     on by default), in the same round: the difference is what fencing costs per event
//     (one row upsert in each transaction), which the hand-written floor does not do.
//   - choreo/atcommit: choreo with the handler's UPDATE queued by consumer.AtCommit instead of
//     sent with tx.Exec (-atcommit, on by default): it goes out with the outbox row and the
//     COMMIT, one round trip fewer per transaction.
//   - choreo/batch=N: the same as choreo with consumer.WithBatch(N, consumer.StandardBatch(cfg)),
//     for each N of -batch (default 16 and 64, app.DefaultConsumerBatch); with -atcommit also
//     choreo/batch=N/atcommit, its UPDATEs queued by consumer.AtCommit.
//   - hand-written, N processes and choreo, N processes (-processes, a list): the floor and
//     choreo with their pipeline split over N child processes of this program in one
//     consumer group, each with its own Postgres pool, Redis client and relay, as N
//     instances of a service run (the hand-written relay runs in the first child only: it
//     has no leader election; choreo's outboxes send NOTIFYs, outbox.WithNotifier, as the
//     services' do). The broker stays in this process. A two-process row is also compared
//     with the same pipeline in one child process: what a second instance costs the floor
//     is the platform's share (more Go runtimes on the same cores), the rest is choreo's.
//
// With -rate R, each mode's input goes into a topic of its own while the mode runs, at R
// events a second, instead of being loaded once before the first mode: below capacity the
// pipelines then wait for each record as services do between requests, events/s is R,
// and the CPU-per-event columns are what to compare (with -processes: what a second
// process costs when each one is mostly idle).
//
// Both consumers get the same franz-go options where they matter: ConsumeResetOffset at
// the start, and FetchMaxWait only when -fetch-max-wait is set (otherwise franz-go's
// default, as a new user would run it). Both relays produce with a default kgo client
// (idempotent, acks=all). The business SQL (the UPDATE and the outbox insert) is the same
// in every mode.
//
// After each mode the run fails loudly unless every balance is the sum of its account's
// unique events, the output topic holds exactly one record per unique input event (by
// causation id: duplicates absorbed), and nothing was dead-lettered.
//
// The physical limit is pgbench running the same transaction (dedup insert, UPDATE,
// outbox insert into the hand-written tables) at -partitions clients on random accounts of
// the same range. Unlike the pipelines, whose accounts are partitioned by key, two pgbench
// clients may hit one account at once.
//
// Each round runs pgbench, then every mode in turn; the table shows each mode's median
// round by throughput and the min–max, the ratios to the hand-written floor and to
// pgbench, the CPU per input event (whole machine; this process, which also hosts the
// in-process broker; the Postgres backends of the benchmark's database, from
// /proc/<pid>/stat; the Redis server, from INFO cpu, other clients' work included),
// the mean events per transaction and the relay's mean rows per round. -json FILE writes the figures as
// {"hotentity": {...}}. -cpuprofile FILE profiles the whole run with the pprof label
// mode=<mode> on every pipeline goroutine: `go tool pprof -tagfocus mode=choreo FILE`.
//
// It needs Postgres (-pg, default $CHOREO_TEST_POSTGRES_DSN or the local server), Redis
// (-redis, default $CHOREO_TEST_REDIS_ADDR or 127.0.0.1:6379) and pgbench on PATH. The
// broker is an in-process kfake cluster unless -brokers is given. It creates and drops its
// own database and deletes its Redis keys.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/bench/internal/benchutil"
)

type config struct {
	pg, redis, brokers string
	events             int
	partitions         int
	accounts           int
	dup                float64
	batches            []int
	processes          []int // -processes: the floor and choreo also run split over this many child processes
	rate               int   // -rate: input produced at this many events a second while each mode runs (0: preloaded)
	atCommit           bool  // the choreo/atcommit mode
	signed             bool  // the choreo/signed mode
	unfenced           bool  // the choreo/unfenced mode
	apache             bool  // -apache: run on kfake, then on a one-node Apache Kafka, and compare
	prefill            int   // -prefill: the choreo/prefilled mode's idempotency records (0: no such mode)
	repeat             int
	pgbenchT           time.Duration
	fetchMaxWait       time.Duration
	seed               uint64
	cpuProfile         string
	jsonOut            string
	jsonKey            string
	out                io.Writer // where the table goes
}

func main() {
	if runAsChild() {
		return
	}
	c := config{out: os.Stdout}
	var batches, processes string
	flag.StringVar(&c.pg, "pg", benchutil.DefaultPostgresDSN(), "Postgres DSN of a database allowed to CREATE DATABASE")
	flag.StringVar(&c.redis, "redis", benchutil.DefaultRedisAddr(), "Redis address")
	flag.StringVar(&c.brokers, "brokers", "", "Kafka seed brokers (comma-separated); default an in-process kfake cluster")
	flag.IntVar(&c.events, "events", 20_000, "input records, duplicates included")
	flag.IntVar(&c.partitions, "partitions", 12, "input topic partitions (= concurrency; also pgbench's clients)")
	flag.IntVar(&c.accounts, "accounts", 1000, "distinct accounts (record keys)")
	flag.Float64Var(&c.dup, "dup", 0.05, "fraction of the input records that are duplicates of earlier ones")
	flag.StringVar(&batches, "batch", "16,"+strconv.Itoa(app.DefaultConsumerBatch), "comma-separated batch sizes of the choreo/batch=N modes (empty: none)")
	flag.StringVar(&processes, "processes", "1,2", "comma-separated process counts (e.g. 1,2): the hand-written floor and choreo also run with their pipeline split over that many child processes in one consumer group (empty: none)")
	flag.IntVar(&c.rate, "rate", 0, "produce each mode's input while it runs, at this many events a second, into a topic of its own (0: the input is loaded once before the first mode); below capacity the events/s column is this rate and the CPU-per-event columns are the comparison")
	flag.BoolVar(&c.atCommit, "atcommit", true, "run the choreo/atcommit mode: choreo with the UPDATE queued by consumer.AtCommit, one event per transaction")
	flag.BoolVar(&c.signed, "signed", true, "run the choreo/signed mode: choreo with every outgoing event signed (Ed25519, outbox.WithSigner) and every input event's signature verified (StandardConfig.TrustedKeys)")
	flag.BoolVar(&c.unfenced, "unfenced", true, "run the choreo/unfenced mode: choreo without the fence check (StandardConfig.Fence false), to show what fencing costs per event")
	flag.BoolVar(&c.apache, "apache", false, "run every mode on the in-process kfake broker, then again on a one-node Apache Kafka 4.4.0 (scripts/kafka.sh; needs Java 17+ and Maven), and print each mode's ratio to the hand-written floor on both, side by side")
	flag.IntVar(&c.prefill, "prefill", 0, "also run choreo with its idempotency table pre-filled with this many records, all inside the retention window (choreo/prefilled; the table is built once and swapped in; 0: not run); the table gives its ratio to choreo on the empty table")
	flag.IntVar(&c.repeat, "repeat", 3, "rounds; the table shows each mode's median round")
	flag.DurationVar(&c.pgbenchT, "pgbench-time", 10*time.Second, "duration of each pgbench run")
	flag.DurationVar(&c.fetchMaxWait, "fetch-max-wait", 0, "kgo.FetchMaxWait for both consumers (0: franz-go's default)")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the workload's accounts, amounts and duplicate positions")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the run (pipeline goroutines labelled mode=<mode>)")
	flag.StringVar(&c.jsonOut, "json", "", `write the figures under the key -json-key of this JSON file, keeping its other keys (make bench: bench/results.json)`)
	flag.StringVar(&c.jsonKey, "json-key", "hotentity", "the key of -json's file the figures go under")
	flag.Parse()
	if batches != "" {
		var err error
		if c.batches, err = benchutil.ParseInts(batches, 1); err != nil {
			fmt.Fprintln(os.Stderr, "bench/hotentity: -batch:", err)
			os.Exit(2)
		}
	}
	if processes != "" {
		var err error
		if c.processes, err = benchutil.ParseInts(processes, 1); err != nil {
			fmt.Fprintln(os.Stderr, "bench/hotentity: -processes:", err)
			os.Exit(2)
		}
	}
	var err error
	if c.apache {
		err = compareBrokers(context.Background(), c)
	} else {
		_, err = run(context.Background(), c)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/hotentity:", err)
		os.Exit(1)
	}
}

// compareBrokers runs every mode on kfake, then on a one-node Apache Kafka, in one
// invocation, and prints each mode's ratios on both side by side (-json: under the keys
// <json-key>_kfake and <json-key>_apache).
func compareBrokers(ctx context.Context, c config) error {
	key := cmp.Or(c.jsonKey, "hotentity")
	c.brokers, c.jsonKey = "", key+"_kfake"
	onKfake, err := run(ctx, c)
	if err != nil {
		return err
	}
	addr, stop, err := benchutil.StartApacheKafka()
	if err != nil {
		return err
	}
	defer stop()
	c.brokers, c.jsonKey = addr, key+"_apache"
	onApache, err := run(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "\n| mode | kfake events/s | Apache Kafka events/s | Apache ÷ kfake | vs hand-written: kfake | Apache |\n|---|---:|---:|---:|---:|---:|\n")
	for i, k := range onKfake.Modes {
		if i >= len(onApache.Modes) || onApache.Modes[i].Mode != k.Mode {
			break
		}
		a := onApache.Modes[i]
		fmt.Fprintf(c.out, "| %s | %.0f | %.0f | %.2f | %.2f× | %.2f× |\n", k.Mode, k.EventsPerSec, a.EventsPerSec, a.EventsPerSec/k.EventsPerSec, k.VsFloor, a.VsFloor)
	}
	return nil
}

// figures is one mode's (or pgbench's) row of the table and of the JSON.
type figures struct {
	Mode         string  `json:"mode"`
	EventsPerSec float64 `json:"events_per_sec"` // median round (pgbench: transactions/s)
	Min          float64 `json:"events_per_sec_min"`
	Max          float64 `json:"events_per_sec_max"`
	VsFloor      float64 `json:"vs_hand_written"` // EventsPerSec / the hand-written mode's
	VsPgbench    float64 `json:"vs_pgbench"`
	CPUMachineUS float64 `json:"cpu_per_event_machine_us"` // whole machine's busy CPU per input event
	CPUProcessUS float64 `json:"cpu_per_event_process_us"` // this process's (pgbench: pgbench's)
	EventsPerTx  float64 `json:"events_per_tx"`
	// The Postgres backends of the benchmark's database and the Redis server (every
	// client's work, other users' included), per input event; 0 for pgbench and where
	// they could not be read (Postgres on another machine).
	CPUPostgresUS     float64 `json:"cpu_per_event_postgres_us"`
	CPURedisUS        float64 `json:"cpu_per_event_redis_us"`
	RelayRowsPerRound float64 `json:"relay_rows_per_round"` // mean rows the relay acknowledged per round
	// Processes is the number of child processes the pipeline was split over (0: this
	// process); VsOneProcess is EventsPerSec over the same pipeline's in one child process.
	Processes    int     `json:"processes,omitempty"`
	VsOneProcess float64 `json:"vs_one_process,omitempty"`
	// Prefilled is the number of idempotency records the mode's table held before it
	// ran; VsEmptyTable is EventsPerSec over choreo's on the empty table.
	Prefilled    int     `json:"prefilled,omitempty"`
	VsEmptyTable float64 `json:"vs_empty_table,omitempty"`
}

// report is what a run measured; -json writes it under the key -json-key.
type report struct {
	Commit       string    `json:"commit"`
	Time         time.Time `json:"time"`
	Events       int       `json:"events"`
	UniqueEvents int       `json:"unique_events"`
	Partitions   int       `json:"partitions"`
	Accounts     int       `json:"accounts"`
	Dup          float64   `json:"dup"`
	Rate         int       `json:"rate,omitempty"` // -rate: events/s fed while each mode ran; 0: preloaded
	Repeat       int       `json:"repeat"`
	GOMAXPROCS   int       `json:"gomaxprocs"`
	Broker       string    `json:"broker"`
	Modes        []figures `json:"modes"` // pgbench first, then the hand-written floor, then choreo's
}

func run(ctx context.Context, c config) (report, error) {
	if c.out == nil {
		c.out = io.Discard
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return report{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return report{}, err
		}
		defer pprof.StopCPUProfile()
	}
	b, err := newBench(ctx, c)
	if err != nil {
		return report{}, err
	}
	defer b.close()
	r := report{
		Commit: commit(), Time: time.Now().UTC(), Events: c.events, UniqueEvents: b.w.unique,
		Partitions: c.partitions, Accounts: c.accounts, Dup: c.dup, Rate: c.rate, Repeat: max(c.repeat, 1),
		GOMAXPROCS: runtime.GOMAXPROCS(0), Broker: b.brokerKind(),
	}
	fed := "preloaded"
	if c.rate > 0 {
		fed = fmt.Sprintf("fed at %d/s while each mode runs", c.rate)
	}
	fmt.Fprintf(c.out, "hot-entity benchmark: %d events (%d unique, %d duplicates, %s) on %d partitions, %d accounts, GOMAXPROCS %d, %s\n",
		c.events, b.w.unique, c.events-b.w.unique, fed, c.partitions, c.accounts, r.GOMAXPROCS, r.Broker)
	if r.Modes, err = b.rounds(ctx); err != nil {
		return report{}, err
	}
	printTable(c.out, r)
	if c.jsonOut != "" {
		if err := benchutil.MergeJSON(c.jsonOut, cmp.Or(c.jsonKey, "hotentity"), r); err != nil {
			return report{}, err
		}
	}
	return r, nil
}

// commit is the checkout's short commit hash, with "-dirty" if it has changes; "" outside
// a git checkout.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	h := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		h += "-dirty"
	}
	return h
}

func printTable(w io.Writer, r report) {
	fmt.Fprintf(w, "\n| mode (%d partitions, %d accounts) | events/s (median) | min–max | vs hand-written | vs pgbench | events/tx | CPU/event: machine | of which this process | Postgres | Redis | relay rows/round |\n",
		r.Partitions, r.Accounts)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, f := range r.Modes {
		fmt.Fprintf(w, "| %s | %.0f | %.0f–%.0f | %.2f× | %.0f%% | %.1f | %.0f µs | %.0f µs | %.0f µs | %.0f µs | %.1f |\n",
			f.Mode, f.EventsPerSec, f.Min, f.Max, f.VsFloor, 100*f.VsPgbench, f.EventsPerTx, f.CPUMachineUS, f.CPUProcessUS,
			f.CPUPostgresUS, f.CPURedisUS, f.RelayRowsPerRound)
	}
	printTargets(w, r)
	for _, f := range r.Modes {
		if f.VsOneProcess > 0 {
			fmt.Fprintf(w, "%s: %.2f× the same pipeline in 1 process\n", f.Mode, f.VsOneProcess)
		}
	}
}

// printTargets writes the ratios the library is held to: one event per transaction, with
// the fence, at least 0.9× the hand-written floor, batch mode at least 2.0× the floor and
// pgbench (the batch size services run with, app.DefaultConsumerBatch, is marked). One
// event per transaction against pgbench is printed as a reference beside the floor's own
// ratio to pgbench: no pipeline that also runs the broker, the relay and the Redis lock
// on the same cores gets near pgbench, the floor included (0.39–0.44× on 2 cores).
func printTargets(w io.Writer, r report) {
	check := func(name string, got, limit float64) {
		v := "met"
		if got < limit {
			v = "NOT met"
		}
		fmt.Fprintf(w, "target: %s %.2f× (>= %.1f×: %s)\n", name, got, limit, v)
	}
	if len(r.Modes) > 1 {
		fmt.Fprintf(w, "reference: hand-written floor vs pgbench %.2f×\n", r.Modes[1].VsPgbench)
	}
	for _, f := range r.Modes {
		switch {
		case f.Mode == "choreo":
			check("choreo (one event per transaction) vs hand-written", f.VsFloor, 0.9)
			fmt.Fprintf(w, "reference: choreo (one event per transaction) vs pgbench %.2f×\n", f.VsPgbench)
		case f.Prefilled > 0:
			check(f.Mode+" vs choreo on an empty table", f.VsEmptyTable, 0.9)
		case strings.HasPrefix(f.Mode, "choreo/batch=") && f.Processes == 0:
			name := f.Mode
			if name == fmt.Sprintf("choreo/batch=%d", app.DefaultConsumerBatch) {
				name += " (the services' default batch)"
			}
			check(name+" vs hand-written", f.VsFloor, 2.0)
			check(name+" vs pgbench", f.VsPgbench, 2.0)
		}
	}
}
