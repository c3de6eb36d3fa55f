package consumer

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/procstat"
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
	m.pids, _ = procstat.PostgresBackends(ctx, pool) // none: the backends' figure is left out
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
		d, err := procstat.CPU(pid)
		if err != nil {
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
