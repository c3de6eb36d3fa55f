package consumer

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cpuMeter counts the CPU time of this process and of the Postgres backends of a pool's
// database over a benchmark, from getrusage and /proc (Linux, local server); the
// backends' figure is left out when /proc does not show them.
type cpuMeter struct {
	pids     []int
	self     time.Duration
	backends time.Duration
	ok       bool
}

func startCPU(ctx context.Context, pool *pgxpool.Pool) *cpuMeter {
	m := &cpuMeter{}
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err == nil {
		for rows.Next() {
			var pid int
			if rows.Scan(&pid) == nil {
				m.pids = append(m.pids, pid)
			}
		}
		rows.Close()
	}
	m.backends, m.ok = m.backendCPU()
	m.self = selfCPU()
	return m
}

// report reports the CPU per op: client-cpu-us/op (this process) and pg-cpu-us/op (the
// backends).
func (m *cpuMeter) report(b *testing.B) {
	n := float64(b.N)
	b.ReportMetric(float64(selfCPU()-m.self)/n/1e3, "client-cpu-us/op")
	if d, ok := m.backendCPU(); ok && m.ok {
		b.ReportMetric(float64(d-m.backends)/n/1e3, "pg-cpu-us/op")
	}
}

func (m *cpuMeter) backendCPU() (time.Duration, bool) {
	if len(m.pids) == 0 {
		return 0, false
	}
	var sum time.Duration
	for _, pid := range m.pids {
		d, ok := procCPU(pid)
		if !ok {
			return 0, false
		}
		sum += d
	}
	return sum, true
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is pid's user + system CPU time from /proc/<pid>/stat (in clock ticks,
// 100 per second on Linux).
func procCPU(pid int) (time.Duration, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0, false
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, true
}
