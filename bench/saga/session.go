package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/bench/internal/orderwatch"
	"github.com/choreo-saga/choreo/chaos"
)

// session is one started system (devkafka, redis, the services' processes) with what
// measures it: the watcher of orders.events, the load generator and the samplers.
type session struct {
	sys   *chaos.System
	pids  map[string][]int // group (service, devkafka, redis) -> process ids
	admin *pgxpool.Pool
	waits *waitSampler
	dbs   *dbStats
	w     *orderwatch.Watcher
	gen   *generator

	stopSampling, stopWatch func()
	samplerOnce, closeOnce  sync.Once
	samplingCtx             context.Context
}

// startSession builds and starts instances processes of each service with topics of
// partitions partitions against pgURL, and what measures them.
func startSession(ctx context.Context, cfg config, pgURL string, instances, partitions int) (*session, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.log, "saga: "+format+"\n", args...) }
	env := []string{
		// As scripts/demo.sh runs them (every other setting at the services' defaults).
		"ORDER_STUCK_AFTER=10s",
		"PAYMENT_HANG_CUSTOMERS=c-hang",
		// Warm pools (-min-conns, as make demo's 16), shared among the instances so that
		// they stay below the server's max_connections: without them the first rate's
		// tails are the new backends its pools open (docs/operations.md, "Slow first seconds").
		"DATABASE_MIN_CONNS=" + strconv.Itoa((cfg.minConns+instances-1)/instances),
	}
	if cfg.profileDir != "" {
		env = append(env, "PPROF=1")
	}
	env = append(env, cfg.env...)
	// DATABASE_MAX_CONNS at the services' default, as make demo.
	maxConns := int(app.LoadConfig(app.MapEnv(map[string]string{"KAFKA_PARTITIONS": strconv.Itoa(partitions)}), "order", "").DatabaseMaxConns)
	if msg := checkConnections(ctx, pgURL, cfg, instances, maxConns); msg != "" {
		logf("warning: %s", msg)
	}
	logf("building the binaries and starting devkafka, redis and %d instance(s) of each service, %d partitions", instances, partitions)
	sys, err := chaos.Start(ctx, chaos.Options{
		Instances:   instances,
		Partitions:  partitions,
		PostgresURL: pgURL,
		MaxConns:    maxConns,
		Env:         env,
		Log:         cfg.log,
		ApacheNodes: map[bool]int{true: 1}[cfg.apache],
		Bins:        cfg.bins,
	})
	if err != nil {
		return nil, err
	}
	s := &session{sys: sys, pids: map[string][]int{}, stopSampling: func() {}, stopWatch: func() {}}
	var urls []string
	for _, in := range sys.Instances() {
		s.pids[in.Service] = append(s.pids[in.Service], in.PID)
		if in.Service == "order" {
			urls = append(urls, in.URL)
		}
	}
	for _, in := range sys.Infra() {
		s.pids[in.Name] = append(s.pids[in.Name], in.PID)
	}
	if s.admin, err = pgxpool.New(ctx, pgURL); err != nil {
		s.close()
		return nil, fmt.Errorf("saga: postgres: %w", err)
	}
	s.waits = newWaitSampler(s.admin, sys.Databases())
	if s.dbs, err = newDBStats(ctx, pgURL, sys.Databases()); err != nil {
		s.close()
		return nil, err
	}
	s.samplingCtx, s.stopSampling = context.WithCancel(ctx)
	if s.w, s.stopWatch, err = orderwatch.Start(ctx, sys.Brokers()); err != nil {
		s.close()
		return nil, err
	}
	s.gen = newGenerator(urls, cfg.maxInFlight, 20, 100, cfg.seed)
	return s, nil
}

// warmup offers 20 orders/s (or rate if lower) for d, unmeasured, and waits for them to
// settle: pools, prepared statements and consumer groups settle.
func (s *session) warmup(ctx context.Context, cfg config, rate int, d time.Duration) {
	wrate := min(20, rate)
	fmt.Fprintf(cfg.log, "saga: warming up: %d orders/s for %s (not measured)\n", wrate, d)
	b := s.gen.run(ctx, float64(wrate), d)
	deadline := time.Now().Add(cfg.drain)
	for unsettled(b, s.w) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
	}
}

// startSampling starts the pg_stat_activity sampler the first time it is called.
func (s *session) startSampling() {
	s.samplerOnce.Do(func() { go s.waits.run(s.samplingCtx, 100*time.Millisecond) })
}

// freeze stops (SIGSTOP) or resumes (SIGCONT) every service process: frozen, they hold
// their sessions but send nothing, and their relays publish nothing.
func (s *session) freeze(stop bool) {
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	for _, svc := range serviceNames {
		for _, pid := range s.pids[svc] {
			_ = syscall.Kill(pid, sig)
		}
	}
}

func (s *session) close() { s.closeOnce.Do(s.shutdown) }

func (s *session) shutdown() {
	s.stopWatch()
	s.stopSampling()
	if s.dbs != nil {
		s.dbs.close()
	}
	if s.admin != nil {
		s.admin.Close()
	}
	s.freeze(false)
	s.sys.Close()
}
