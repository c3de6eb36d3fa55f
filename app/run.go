package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type exit struct {
	name string
	err  error
}

// group runs components under one cancellable context and reports early exits.
type group struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

func (a *App) start(parent context.Context, cs []component, exits chan<- exit, stopping *atomic.Bool) *group {
	ctx, cancel := context.WithCancel(parent)
	g := &group{cancel: cancel}
	for _, c := range cs {
		g.wg.Go(func() {
			err := c.run(ctx)
			if stopping.Load() {
				if err != nil && !errors.Is(err, context.Canceled) {
					g.mu.Lock()
					g.errs = append(g.errs, fmt.Errorf("app: %s: %w", c.name, err))
					g.mu.Unlock()
				}
				return
			}
			if err == nil && !c.mustRun {
				a.Logger.Info("app: background function finished", slog.String("component", c.name))
				return
			}
			if err == nil {
				err = errors.New("stopped before shutdown")
			}
			exits <- exit{c.name, err}
		})
	}
	return g
}

// stop cancels g and waits for it until ctx ends.
func (g *group) stop(ctx context.Context) error {
	g.cancel()
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		g.mu.Lock()
		defer g.mu.Unlock()
		return errors.Join(g.errs...)
	case <-ctx.Done():
		return fmt.Errorf("app: shutdown timed out: %w", ctx.Err())
	}
}

// Run serves HTTP, runs the relay, the consumers and the background functions until ctx
// is cancelled, SIGINT or SIGTERM arrives (unless WithoutSignals) or a component fails,
// and then shuts down in order, within Config.ShutdownTimeout:
//
//  1. /readyz turns 503 and the HTTP server stops accepting requests and waits for the
//     ones in flight;
//  2. consumers drain (in-flight handlers finish and their offsets are committed) and
//     background functions stop;
//  3. the outbox relay publishes what the last handlers enqueued (its batch in flight)
//     and steps down;
//  4. leases still being released reach Redis, and Kafka, Redis and Postgres connections
//     close;
//  5. telemetry is flushed (when the App set it up).
//
// Run returns nil after a shutdown caused by ctx or a signal, and an error wrapping
// [ErrComponent] when a component failed. An App runs once; Close is not needed after Run.
func (a *App) Run(ctx context.Context) (err error) {
	if a.state.Load() != stateNew || !a.ran.CompareAndSwap(false, true) {
		return ErrRunning
	}
	if err := a.startKit(); err != nil {
		a.state.Store(stateStopping)
		_ = a.closeResources(context.Background())
		return err
	}
	if a.opts.signals {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	log := a.Logger

	ln := a.opts.listener
	if ln == nil {
		ln, err = net.Listen("tcp", a.Config.HTTPAddr)
	}
	if err != nil {
		a.state.Store(stateStopping)
		a.closeResources(context.Background())
		return fmt.Errorf("app: listen on %s: %w", a.Config.HTTPAddr, err)
	}
	addr := ln.Addr().String()
	a.addr.Store(&addr)
	limits := a.opts.httpLimits.withDefaults()
	handler := a.Handler()
	adminLn := a.opts.adminListener
	if adminLn == nil && a.opts.listener == nil && a.Config.AdminAddr != "" {
		if adminLn, err = net.Listen("tcp", a.Config.AdminAddr); err != nil {
			ln.Close()
			a.state.Store(stateStopping)
			a.closeResources(context.Background())
			return fmt.Errorf("app: listen on %s (%s): %w", a.Config.AdminAddr, envAdminAddr, err)
		}
	}
	var admin *http.Server
	adminLimits := HTTPLimits{}.withDefaults()
	if adminLn != nil && a.Config.Pprof && a.Config.AdminToken == "" && !Loopback(adminLn.Addr().String()) {
		// The listener was given (WithAdminListener), so Config.Validate could not see it.
		ln.Close()
		adminLn.Close()
		a.state.Store(stateStopping)
		a.closeResources(context.Background())
		return fmt.Errorf("%w: %s: serves profiles and the command line on %s, beyond loopback: set %s or listen on loopback",
			ErrInvalidConfig, envPprof, adminLn.Addr(), envAdminToken)
	}
	if adminLn != nil {
		handler = a.publicHandler()
		amux := a.adminMux(defaultRequestTimeout)
		if a.Config.Pprof {
			handlePprof(amux, defaultRequestTimeout, a.Config.AdminToken)
		}
		admin = newServer(requireHost(a.Config.AllowedHosts, amux), adminLimits)
		admin.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
		aaddr := adminLn.Addr().String()
		a.adminAddr.Store(&aaddr)
	}
	if metricsAddr := cmp.Or(a.AdminAddr(), addr); a.Config.AdminToken == "" && !Loopback(metricsAddr) {
		log.Warn("app: /metrics is served beyond loopback without "+envAdminToken+": every peer that reaches "+
			metricsAddr+" reads the service's metrics; set "+envAdminToken+" or bind "+envAdminAddr+" to loopback",
			slog.String("addr", metricsAddr))
	}

	var stopping atomic.Bool
	exits := make(chan exit, len(a.consumers)+len(a.workers)+3)
	base := context.WithoutCancel(ctx)
	if topics := dedupe(a.topics); len(topics) > 0 {
		tctx, cancel := context.WithTimeout(ctx, ensureTopicsTimeout)
		err := EnsureTopics(tctx, a.Kafka, a.Config.KafkaPartitions, topics...)
		cancel()
		if err != nil {
			// Each consumer checks at start that its dead-letter topics exist and fails
			// on one that is still missing.
			log.Warn("app: creating topics failed", slog.Any("topics", topics), slog.Any("error", err))
		}
	}
	relay := a.start(base, []component{{name: "outbox relay", run: a.relay.Run, mustRun: true}}, exits, &stopping)
	consumers := a.start(base, append(append([]component(nil), a.consumers...), a.workers...), exits, &stopping)

	srv := newServer(requireHost(a.Config.AllowedHosts, handler), limits)
	srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		if err := srv.Serve(limitConns(srv, ln, limits)); err != nil && !errors.Is(err, http.ErrServerClosed) && !stopping.Load() {
			exits <- exit{"http server", err}
		}
	}()
	adminDone := make(chan struct{})
	go func() {
		defer close(adminDone)
		if admin == nil {
			return
		}
		if err := admin.Serve(limitConns(admin, adminLn, adminLimits)); err != nil && !errors.Is(err, http.ErrServerClosed) && !stopping.Load() {
			exits <- exit{"admin http server", err}
		}
	}()

	a.state.Store(stateRunning)
	close(a.ready)
	traces := a.Telemetry.TracesExporter
	if traces == "" {
		traces = "none"
	}
	log.Info("app: started", slog.String("http_addr", addr), slog.String("admin_addr", a.AdminAddr()),
		slog.Int("consumers", len(a.consumers)), slog.Int("background", len(a.workers)),
		// Without an exporter spans carry ids only (tracing.Setup): say so where operators look.
		slog.String("traces_exporter", traces), slog.Bool("spans_recorded", a.Telemetry.RecordsSpans))

	var cause error
	select {
	case <-ctx.Done():
		log.Info("app: shutting down", slog.String("cause", context.Cause(ctx).Error()))
	case e := <-exits:
		cause = fmt.Errorf("%w: %s: %w", ErrComponent, e.name, e.err)
		log.Error("app: component failed, shutting down", slog.String("component", e.name), slog.Any("error", e.err))
	}
	stopping.Store(true)
	a.state.Store(stateStopping)

	sctx, cancel := context.WithTimeout(context.Background(), a.Config.ShutdownTimeout)
	defer cancel()
	errs := []error{cause}
	step := func(name string, f func() error) {
		start := time.Now()
		if err := f(); err != nil {
			errs = append(errs, err)
			log.Warn("app: shutdown step failed", slog.String("step", name), slog.Any("error", err))
			return
		}
		log.Info("app: shutdown step done", slog.String("step", name), slog.Duration("took", time.Since(start)))
	}
	step("http", func() error {
		if err := srv.Shutdown(sctx); err != nil {
			return fmt.Errorf("app: http shutdown: %w", err)
		}
		<-httpDone
		if admin != nil {
			if err := admin.Shutdown(sctx); err != nil {
				return fmt.Errorf("app: admin http shutdown: %w", err)
			}
		}
		<-adminDone
		return nil
	})
	step("consumers", func() error { return consumers.stop(sctx) })
	step("relay", func() error { return relay.stop(sctx) })
	step("close", func() error { return a.closeResources(sctx) })
	return errors.Join(errs...)
}

// Close releases the App's connections and flushes its telemetry without running it:
// for an App built by New whose Run is never called. It is safe to call more than once
// and after Run.
func (a *App) Close() error {
	a.state.Store(stateStopping)
	ctx, cancel := context.WithTimeout(context.Background(), a.Config.ShutdownTimeout)
	defer cancel()
	return a.closeResources(ctx)
}

func (a *App) closeResources(ctx context.Context) error {
	var err error
	a.closeOnce.Do(func() {
		var errs []error
		if a.Kafka != nil {
			a.Kafka.Close()
		}
		if a.Locker != nil {
			// Leases released in the background after the last handlers (Lock).
			if e := a.Locker.Wait(ctx); e != nil {
				errs = append(errs, fmt.Errorf("app: lock releases: %w", e))
			}
		}
		if a.Redis != nil {
			if e := a.Redis.Close(); e != nil {
				errs = append(errs, fmt.Errorf("app: close redis: %w", e))
			}
		}
		if a.Pool != nil {
			a.Pool.Close()
		}
		if a.ownTel && a.Telemetry != nil {
			if e := a.Telemetry.Shutdown(ctx); e != nil {
				errs = append(errs, fmt.Errorf("app: flush telemetry: %w", e))
			}
		}
		err = errors.Join(errs...)
	})
	return err
}

// dedupe returns topics without repeats, in first-seen order.
func dedupe(topics []string) []string {
	var out []string
	for _, t := range topics {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}
