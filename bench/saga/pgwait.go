package main

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/procstat"
)

// waitSampler samples pg_stat_activity of the services' databases every interval:
// which state and wait event each non-idle session is in. Averaged over the samples,
// a count is the mean number of sessions in that state, so "1.8 active Lock:tuple"
// means that, at any moment, almost two of the service's sessions were waiting for a
// row lock. It also sums the CPU time the Postgres backends serving each database used.
type waitSampler struct {
	pool *pgxpool.Pool
	dbs  map[string]string // database -> service

	mu      sync.Mutex
	samples int
	counts  map[string]map[string]int // service -> "state wait_type:wait" -> sessions summed over samples
	backend map[int]string            // backend pid -> service
	cpu0    map[int]time.Duration     // backend pid -> CPU when first seen in this window
	cs0     map[int]int64             // backend pid -> context switches when first seen
}

func newWaitSampler(pool *pgxpool.Pool, databases map[string]string) *waitSampler {
	s := &waitSampler{pool: pool, dbs: map[string]string{}}
	for svc, db := range databases {
		s.dbs[db] = svc
	}
	s.reset()
	return s
}

// reset starts a new window.
func (s *waitSampler) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = 0
	s.counts = map[string]map[string]int{}
	s.backend = map[int]string{}
	s.cpu0 = map[int]time.Duration{}
	s.cs0 = map[int]int64{}
}

// run samples until ctx ends.
func (s *waitSampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		_ = s.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *waitSampler) sample(ctx context.Context) error {
	dbs := make([]string, 0, len(s.dbs))
	for db := range s.dbs {
		dbs = append(dbs, db)
	}
	rows, err := s.pool.Query(ctx, `SELECT pid, datname, coalesce(state, ''),
		coalesce(wait_event_type, ''), coalesce(wait_event, '')
		FROM pg_stat_activity WHERE datname = ANY($1) AND pid <> pg_backend_pid()`, dbs)
	if err != nil {
		return err
	}
	type act struct {
		pid                  int
		db, state, typ, name string
	}
	acts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (act, error) {
		var a act
		var pid int32
		err := r.Scan(&pid, &a.db, &a.state, &a.typ, &a.name)
		a.pid = int(pid)
		return a, err
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	for _, a := range acts {
		svc := s.dbs[a.db]
		if _, ok := s.backend[a.pid]; !ok {
			s.backend[a.pid] = svc
			s.cpu0[a.pid], _ = procstat.CPU(a.pid)
			s.cs0[a.pid], _ = procstat.ContextSwitches(a.pid)
		}
		if a.state == "idle" || a.state == "" {
			continue
		}
		key := a.state + " " + a.typ + ":" + a.name
		if a.typ == "" {
			key = a.state + " (on CPU)"
		}
		if s.counts[svc] == nil {
			s.counts[svc] = map[string]int{}
		}
		s.counts[svc][key]++
	}
	return nil
}

// waitShare is one state/wait event and the mean number of sessions in it.
type waitShare struct {
	Wait     string  `json:"wait"`
	Sessions float64 `json:"mean_sessions"`
}

// top returns each service's n most frequent states/waits of the window.
func (s *waitSampler) top(n int) map[string][]waitShare {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]waitShare{}
	for svc, m := range s.counts {
		var ws []waitShare
		for k, c := range m {
			ws = append(ws, waitShare{Wait: k, Sessions: float64(c) / float64(max(s.samples, 1))})
		}
		slices.SortFunc(ws, func(a, b waitShare) int {
			return cmp.Or(cmp.Compare(b.Sessions, a.Sessions), cmp.Compare(a.Wait, b.Wait))
		})
		out[svc] = ws[:min(n, len(ws))]
	}
	return out
}

// backendCPU returns, per service, the CPU time its Postgres backends used since the
// window started (or since they were first seen in it).
func (s *waitSampler) backendCPU() map[string]time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]time.Duration{}
	for pid, svc := range s.backend {
		if c, err := procstat.CPU(pid); err == nil {
			out[svc] += c - s.cpu0[pid]
		}
	}
	return out
}

// backendContextSwitches returns, per service, its Postgres backends' context switches
// since the window started (or since they were first seen in it).
func (s *waitSampler) backendContextSwitches() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int64{}
	for pid, svc := range s.backend {
		if c, err := procstat.ContextSwitches(pid); err == nil {
			out[svc] += c - s.cs0[pid]
		}
	}
	return out
}
