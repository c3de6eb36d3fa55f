package benchutil

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrNoPgbench means pgbench is not on PATH.
var ErrNoPgbench = errors.New("pgbench not on PATH (it comes with the PostgreSQL client package, e.g. postgresql-client)")

// RequirePgbench returns ErrNoPgbench when pgbench is not on PATH, so that a benchmark can
// stop before it spends minutes on figures it could not compare with anything.
func RequirePgbench() error {
	if _, err := exec.LookPath("pgbench"); err != nil {
		return fmt.Errorf("%w: %w", ErrNoPgbench, err)
	}
	return nil
}

// Pgbench is one pgbench run of a custom script against an initialised database: no
// vacuum (-n), Clients client sessions over min(Clients, NumCPU) threads.
type Pgbench struct {
	DSN    string // database to run against
	Script string // the script's text (pgbench's custom script syntax)

	Clients int // -c; 0 means 1

	// Duration is how long to run (-T, rounded to whole seconds, at least 1), unless
	// Transactions is set.
	Duration time.Duration
	// Transactions, when positive, is the number of transactions each client runs (-t)
	// instead of running for Duration.
	Transactions int

	QueryMode string // -M: "prepared" (the default when empty), "simple" or "extended"
	PGOptions string // run-time settings for the sessions (PGOPTIONS), e.g. "-c synchronous_commit=off"
	Latencies bool   // log every transaction (-l) and return their latencies
	// Rate, when positive, throttles the run to this many transactions per second in
	// all (-R). Latencies are then each transaction's own time, without the wait for
	// its scheduled start (pgbench's schedule lag).
	Rate int
}

// PgbenchResult is what one pgbench run measured.
type PgbenchResult struct {
	TPS          float64         // transactions per second, without connection time
	Transactions int             // transactions processed
	Latencies    []time.Duration // every transaction's latency, ascending; only with Pgbench.Latencies
	// CPU is the machine's busy CPU time during the run and, as Process, the pgbench
	// process's own (Machine is zero where SampleCPU is unsupported).
	CPU CPUTime
}

var (
	// pgbench 14 and later print "without initial connection time"; older ones print the
	// figure twice and "excluding connections establishing" on the one wanted.
	tpsRE = regexp.MustCompile(`tps = ([0-9.]+) \((?:without initial connection time|excluding connections establishing)\)`)
	txsRE = regexp.MustCompile(`number of transactions actually processed: ([0-9]+)`)
)

// Run runs pgbench and parses its report. An error carries pgbench's output.
func (p Pgbench) Run(ctx context.Context) (PgbenchResult, error) {
	dir, err := os.MkdirTemp("", "choreo-pgbench-")
	if err != nil {
		return PgbenchResult{}, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "script.sql")
	if err := os.WriteFile(script, []byte(p.Script), 0o600); err != nil {
		return PgbenchResult{}, err
	}
	clients := max(p.Clients, 1)
	args := []string{"-n", "-M", cmp.Or(p.QueryMode, "prepared"), "-f", script,
		"-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, runtime.NumCPU()))}
	if p.Transactions > 0 {
		args = append(args, "-t", strconv.Itoa(p.Transactions))
	} else {
		args = append(args, "-T", strconv.Itoa(max(1, int(p.Duration.Round(time.Second)/time.Second))))
	}
	if p.Rate > 0 {
		args = append(args, "-R", strconv.Itoa(p.Rate))
	}
	logPrefix := filepath.Join(dir, "log")
	if p.Latencies {
		args = append(args, "-l", "--log-prefix="+logPrefix)
	}
	cmd := exec.CommandContext(ctx, "pgbench", append(args, p.DSN)...)
	if p.PGOptions != "" {
		cmd.Env = append(os.Environ(), "PGOPTIONS="+p.PGOptions)
	}

	before, err := machineCPU()
	if err != nil {
		return PgbenchResult{}, err
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return PgbenchResult{}, fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	after, err := machineCPU()
	if err != nil {
		return PgbenchResult{}, err
	}

	tps, txs := tpsRE.FindSubmatch(out), txsRE.FindSubmatch(out)
	if tps == nil || txs == nil {
		return PgbenchResult{}, fmt.Errorf("pgbench: no tps in output:\n%s", out)
	}
	r := PgbenchResult{CPU: CPUTime{
		Machine: after - before,
		Process: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(),
	}}
	if r.TPS, err = strconv.ParseFloat(string(tps[1]), 64); err != nil {
		return PgbenchResult{}, fmt.Errorf("pgbench: tps: %w", err)
	}
	if r.Transactions, err = strconv.Atoi(string(txs[1])); err != nil {
		return PgbenchResult{}, fmt.Errorf("pgbench: transactions: %w", err)
	}
	if p.Latencies {
		if r.Latencies, err = readLatencies(logPrefix, p.Rate > 0); err != nil {
			return PgbenchResult{}, err
		}
	}
	return r, nil
}

// machineCPU is SampleCPU's Machine, 0 where unsupported.
func machineCPU() (time.Duration, error) {
	c, err := SampleCPU()
	if errors.Is(err, errors.ErrUnsupported) {
		return 0, nil
	}
	return c.Machine, err
}

// readLatencies reads pgbench's per-transaction logs (prefix.PID and prefix.PID.N, one per
// thread; the third column is the latency in µs) and returns the latencies sorted.
func readLatencies(prefix string, throttled bool) ([]time.Duration, error) {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil {
		return nil, err
	}
	var lat []time.Duration
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			// client_id transaction_no time script_no time_epoch time_us [schedule_lag]
			// [...]; under -R, time counts from the scheduled start.
			fields := strings.Fields(s.Text())
			if len(fields) < 3 || (throttled && len(fields) < 7) {
				continue
			}
			us, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil {
				continue
			}
			if throttled {
				lag, err := strconv.ParseInt(fields[6], 10, 64)
				if err != nil {
					continue
				}
				us -= lag
			}
			lat = append(lat, time.Duration(us)*time.Microsecond)
		}
		err = s.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("pgbench log %s: %w", name, err)
		}
	}
	if len(lat) == 0 {
		return nil, errors.New("pgbench wrote no latency log")
	}
	slices.Sort(lat)
	return lat, nil
}
