// Package procstat reads the CPU time and memory of local processes from /proc, for
// benchmarks that count what a run cost in each process: a service, a Postgres backend.
// It is Linux only; elsewhere its functions return errors.
package procstat

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat (100 on Linux).
const clockTicks = 100

// CPU returns the user + system CPU time pid has used, from /proc/PID/stat.
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: fields after
	// the last ')' start with field 3 (state), so utime (14) and stime (15) are 11 and 12.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')' in %q", pid, s)
	}
	fs := strings.Fields(s[i+1:])
	if len(fs) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(fs))
	}
	var ticks int64
	for _, f := range fs[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// ContextSwitches returns how often pid's threads have been switched off a CPU so far,
// voluntarily (blocked: a futex, a socket, a sleep) or not (preempted), summed over the
// threads it has now, from /proc/PID/task/*/status. A thread that exited is no longer
// counted, so read it for processes whose threads live as long as they do (Go programs,
// Postgres backends).
func ContextSwitches(pid int) (int64, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/status")
		if err != nil {
			continue // the thread exited meanwhile
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok || (k != "voluntary_ctxt_switches" && k != "nonvoluntary_ctxt_switches") {
				continue
			}
			c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s/%s/status %s: %w", dir, t.Name(), k, err)
			}
			n += c
		}
	}
	return n, nil
}

// Querier is what PostgresBackends needs of a pool or connection.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// PostgresBackends returns the process ids of the Postgres backends connected to db's
// current database (its own connection included). Their CPU is readable with CPU only
// when the server runs on this machine.
func PostgresBackends(ctx context.Context, db Querier) ([]int, error) {
	rows, err := db.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return nil, fmt.Errorf("procstat: list backends: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("procstat: list backends: %w", err)
	}
	return pids, nil
}

// Memory returns pid's resident set now (VmRSS) and its peak so far (VmHWM), in bytes.
func Memory(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		fs := strings.Fields(v) // "1234 kB"
		if len(fs) == 0 {
			continue
		}
		n, err := strconv.ParseInt(fs[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status %s: %w", pid, k, err)
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			hwm = n << 10
		}
	}
	return rss, hwm, nil
}
