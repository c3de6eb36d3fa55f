package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/internal/procstat"
)

// serverCPU is the CPU consumed so far by the Postgres backends of the benchmark's
// database (each backend's /proc/<pid>/stat, keyed by pid, Linux only) and by the
// Redis server (INFO cpu: every client's work, other users' included).
type serverCPU struct {
	backends map[int]time.Duration
	redis    time.Duration
	ok       bool // false when /proc or INFO could not be read: the columns show 0
}

// sampleServerCPU samples serverCPU. Backends that end between two samples are not
// counted (every pipeline keeps its connections until after the second sample).
func sampleServerCPU(ctx context.Context, pool *pgxpool.Pool, rdb *redis.Client) serverCPU {
	s := serverCPU{backends: map[int]time.Duration{}, ok: true}
	pids, err := procstat.PostgresBackends(ctx, pool)
	if err != nil {
		return serverCPU{}
	}
	for _, pid := range pids {
		if d, err := procstat.CPU(pid); err == nil { // else a backend that just ended, or a remote server
			s.backends[pid] = d
		}
	}
	if len(s.backends) == 0 {
		s.ok = false
	}
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return serverCPU{}
	}
	var sec float64
	for _, line := range strings.Split(info, "\n") {
		k, v, found := strings.Cut(strings.TrimSpace(line), ":")
		if found && (k == "used_cpu_sys" || k == "used_cpu_user") {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return serverCPU{}
			}
			sec += x
		}
	}
	s.redis = time.Duration(sec * float64(time.Second))
	return s
}

// since returns the Postgres and Redis CPU consumed between s and the later sample t,
// per event (0, 0 if either sample failed).
func (t serverCPU) since(s serverCPU, events int) (pg, rd time.Duration) {
	if !s.ok || !t.ok || events <= 0 {
		return 0, 0
	}
	for pid, d := range t.backends {
		pg += d - s.backends[pid] // a backend that started in between counts from 0
	}
	return pg / time.Duration(events), (t.redis - s.redis) / time.Duration(events)
}
