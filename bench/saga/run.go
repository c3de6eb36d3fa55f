package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/bench/internal/orderwatch"
	"github.com/choreo-saga/choreo/internal/procstat"
)

// serviceNames in table order.
var serviceNames = []string{"order", "payment", "inventory"}

// run starts the system, offers every rate and returns the results (partial ones with
// an error when a step fails). After the rates it offers half the saturation rate (the
// tail there), with -statements records and replays the services' SQL, and with -sweep
// measures the cost per order with more instances.
func run(ctx context.Context, cfg config) (*results, error) {
	res := &results{Date: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
		Env: cfg.env, Instances: cfg.instances, Partitions: cfg.partitions, DurationSeconds: cfg.duration.Seconds(),
		DrainSeconds: cfg.drain.Seconds(), Seed: cfg.seed, IdleRSSMiB: map[string]float64{}}
	res.Commit, res.Dirty = benchutil.GitCommit(ctx)
	res.LoadAvgBefore, _ = loadAverage()

	logf := func(format string, args ...any) { fmt.Fprintf(cfg.log, "saga: "+format+"\n", args...) }
	pgURL := benchutil.DefaultPostgresDSN()
	if cfg.statements {
		c, err := statementsCluster(ctx)
		if err != nil {
			return nil, err
		}
		defer c.Drop()
		pgURL = c.URL()
		logf("private Postgres cluster %s with pg_stat_statements at %s", c.Name, c.Addr())
	}
	s, err := startSession(ctx, cfg, pgURL, cfg.instances, cfg.partitions)
	if err != nil {
		return nil, err
	}
	defer func() { s.close() }()
	// Idle: the services have started, run their migrations and joined their groups.
	time.Sleep(2 * time.Second)
	for g, ps := range s.pids {
		for _, p := range ps {
			rss, _, _ := procstat.Memory(p)
			res.IdleRSSMiB[g] += mib(rss)
		}
	}
	if cfg.warmup > 0 {
		s.warmup(ctx, cfg, cfg.rates[0], cfg.warmup)
		res.WarmupSeconds = cfg.warmup.Seconds()
	}
	for _, rate := range cfg.rates {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		r, err := runRateStatements(ctx, cfg, s, rate, cfg.duration)
		if r != nil {
			res.Rates = append(res.Rates, *r)
		}
		if err != nil {
			return res, err
		}
	}
	res.summarize()
	half := max(1, int(res.PeakConfirmedPerSec/2+0.5))
	if cfg.half && res.PeakConfirmedPerSec > 0 {
		logf("half the saturation rate: %d/s offered", half)
		r, err := runRateStatements(ctx, cfg, s, half, cfg.duration)
		if err != nil {
			return res, err
		}
		res.Half = &halfSaturation{rateResult: *r, PeakConfirmedPerSec: res.PeakConfirmedPerSec}
		res.Half.summarize()
	}
	if cfg.statements && res.PeakConfirmedPerSec > 0 {
		if res.Replay, err = recordAndReplay(ctx, cfg, s, pgURL, res.PeakAtOffered, res); err != nil {
			return res, err
		}
	}
	s.close()
	if len(cfg.sweep) > 0 {
		rate := cfg.sweepRate
		if rate == 0 {
			rate = half
		}
		if res.Sweep, err = sweepInstances(ctx, cfg, pgURL, rate); err != nil {
			return res, err
		}
	}
	res.LoadAvgAfter, _ = loadAverage()
	if cfg.jsonPath != "" {
		if err := writeJSON(cfg.jsonPath, res); err != nil {
			return res, err
		}
	}
	if cfg.svgPath != "" {
		if err := os.WriteFile(cfg.svgPath, plotSVG(res), 0o644); err != nil {
			return res, fmt.Errorf("saga: %w", err)
		}
	}
	return res, nil
}

// runRateStatements is runRate with the statement counts of -statements, logged.
func runRateStatements(ctx context.Context, cfg config, s *session, rate int, d time.Duration) (*rateResult, error) {
	s.startSampling()
	if cfg.statements {
		resetStatements(ctx, s.admin)
	}
	r, err := runRate(ctx, cfg, rate, d, s)
	if r != nil && cfg.statements {
		r.Statements = readStatements(ctx, s.admin, s.sys.Databases(), r.created)
	}
	if r != nil {
		fmt.Fprintf(cfg.log, "saga: %d/s offered: sent %.0f/s, confirmed %.1f/s, p50 %s p99 %s, %d unsettled\n", rate, r.SentPerSec,
			r.ConfirmedPerSec, ms(r.P50ms), ms(r.P99ms), r.Unsettled)
	}
	return r, err
}

// runRate offers rate orders/s for cfg.duration, measures the window, then drains.
func runRate(ctx context.Context, cfg config, rate int, d time.Duration, s *session) (*rateResult, error) {
	gen, w, waits, dbs, pids, sys := s.gen, s.w, s.waits, s.dbs, s.pids, s.sys
	r := &rateResult{Offered: rate, Services: map[string]serviceStats{}}
	waits.reset()
	db0 := dbs.snapshot(ctx)
	wal0, walOK := dbs.wal(ctx)
	t0 := time.Now()
	pw := newProcWatch(pids)
	gen0, _ := benchutil.SampleCPU()
	start := time.Now()
	end := start.Add(d)

	// The window's CPU figures are taken when the schedule ends, not when the last
	// answer arrives.
	window := make(chan struct{})
	var winCPU, pgCPU map[string]time.Duration
	var winCS, pgCS map[string]int64
	var genCPU benchutil.CPUTime
	var top map[string][]waitShare
	go func() {
		defer close(window)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for time.Now().Before(end) {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				pw.sample()
			}
		}
		winCPU, pgCPU, top = pw.cpu(), waits.backendCPU(), waits.top(6)
		winCS, pgCS = pw.contextSwitches(), waits.backendContextSwitches()
		g1, _ := benchutil.SampleCPU()
		genCPU = g1.Sub(gen0)
	}()
	var profWG sync.WaitGroup
	if cfg.profileDir != "" && rate == cfg.profileRate {
		profWG.Go(func() { r.Profiles = takeProfiles(ctx, sys, cfg.profileDir, cfg.profileTrace, rate, cfg.log) })
	}

	b := gen.run(ctx, float64(rate), d)
	<-window
	profWG.Wait()
	secs := d.Seconds()
	r.Sent = len(b.orders)
	r.SentPerSec = float64(r.Sent) / max(secs, b.lastSent.Sub(b.started).Seconds())
	r.Late, r.MaxLagMs, r.PostErrors, r.FirstError = b.late, b.maxLag.Seconds()*1000, b.errors, b.firstErr
	r.Shed = b.shed
	r.ConfirmedPerSec = float64(w.ConfirmedBetween(start, end)) / secs
	for t := start; t.Before(end); t = t.Add(time.Second) {
		next := t.Add(time.Second)
		if next.After(end) {
			next = end
		}
		r.ConfirmedEachSecond = append(r.ConfirmedEachSecond, w.ConfirmedBetween(t, next))
	}
	half := start.Add(d / 2)
	r.ConfirmedPerSecLastHalf = float64(w.ConfirmedBetween(half, end)) / end.Sub(half).Seconds()
	r.GeneratorCPUPercent = pct(genCPU.Process, secs)
	r.MachineCPUPercent = pct(genCPU.Machine, secs) / float64(runtime.NumCPU())
	for g, c := range winCPU {
		st := r.Services[g]
		st.CPUPercent = pct(c, secs)
		st.MaxRSSMiB = mib(pw.maxRSS[g])
		st.PostgresCPUPercent = pct(pgCPU[g], secs)
		st.TopWaits = top[g]
		if confirmed := r.ConfirmedPerSec * secs; confirmed > 0 {
			st.ContextSwitchesPerOrder = float64(winCS[g]) / confirmed
			st.PostgresContextSwitchesPerOrder = float64(pgCS[g]) / confirmed
		}
		r.Services[g] = st
	}

	// Drain: wait (bounded) until every placed order of this rate has a terminal event.
	drainStart := time.Now()
	deadline := drainStart.Add(cfg.drain)
	for {
		if unsettled(b, w) == 0 || !time.Now().Before(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.DrainSeconds = time.Since(drainStart).Seconds()
	// Postgres 15 backends report their counters at most once a second.
	time.Sleep(1500 * time.Millisecond)
	created := 0
	for _, o := range b.orders {
		if o != nil && o.id != "" {
			created++
		}
	}
	r.DB = account(db0, dbs.snapshot(ctx), created, time.Since(t0))
	if wal1, ok := dbs.wal(ctx); ok && walOK {
		r.WAL = accountWAL(wal0, wal1, created, cfg.statements)
	}
	r.created = created
	var lat []time.Duration
	for _, o := range b.orders {
		if o == nil || o.id == "" {
			continue
		}
		e, ok := w.Lookup(o.id)
		if !ok {
			r.Unsettled++
			continue
		}
		lat = append(lat, e.At.Sub(o.due))
		switch e.Outcome {
		case orderwatch.Confirmed:
			r.Confirmed++
		case orderwatch.Rejected:
			r.Rejected++
		case orderwatch.Cancelled:
			r.Cancelled++
		}
	}
	slices.Sort(lat)
	r.LatencyN = len(lat)
	r.P50ms = benchutil.Percentile(lat, 0.50).Seconds() * 1000
	r.P95ms = benchutil.Percentile(lat, 0.95).Seconds() * 1000
	r.P99ms = benchutil.Percentile(lat, 0.99).Seconds() * 1000
	r.LoadAvg, _ = loadAverage()
	return r, ctx.Err()
}

func unsettled(b *burst, w *orderwatch.Watcher) int {
	n := 0
	for _, o := range b.orders {
		if o == nil || o.id == "" {
			continue
		}
		if _, ok := w.Lookup(o.id); !ok {
			n++
		}
	}
	return n
}

func pct(d time.Duration, secs float64) float64 { return 100 * d.Seconds() / secs }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// profileName is the file of svc's CPU profile (or, with trace, execution trace) taken
// during rate.
func profileName(dir, name string, rate int, trace bool) string {
	ext := ".pprof"
	if trace {
		ext = ".trace"
	}
	return filepath.Join(dir, name+"-"+strconv.Itoa(rate)+ext)
}

// checkConnections returns a warning when the services could open more Postgres
// connections than the server has free: instances × 3 services × (pool + the outbox
// relay's two sessions), the pool being DATABASE_MAX_CONNS from -env if set, else
// maxConns. Past max_connections the services' requests fail with "too many clients"
// (503 unavailable) and the run measures that rather than the saga. It returns "" when
// they fit or the server cannot be asked.
func checkConnections(ctx context.Context, pgURL string, cfg config, instances, maxConns int) string {
	pool := maxConns
	for _, kv := range cfg.env {
		if v, ok := strings.CutPrefix(kv, "DATABASE_MAX_CONNS="); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				pool = n
			}
		}
	}
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return ""
	}
	defer conn.Close(ctx)
	var limit, reserved, used int
	if err := conn.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
		current_setting('superuser_reserved_connections')::int, (SELECT count(*) FROM pg_stat_activity)`).
		Scan(&limit, &reserved, &used); err != nil {
		return ""
	}
	need := instances * 3 * (pool + 2)
	if free := limit - reserved - used; need > free {
		return fmt.Sprintf("the services may open %d Postgres connections (%d instance(s) × 3 services × (pool %d + 2)), "+
			"but the server has %d free (max_connections %d, %d reserved, %d in use): if the pools fill up, requests fail with "+
			"\"too many clients\"; lower -partitions or set -env DATABASE_MAX_CONNS=N", need, instances, pool, free, limit, reserved, used)
	}
	return ""
}
