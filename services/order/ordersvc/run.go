package ordersvc

import (
	"context"
	"fmt"
	"net/http"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/admission"
	"github.com/choreo-saga/choreo/services/internal/sagasvc"
)

// Run starts the order service with cfg and blocks until ctx is cancelled (or SIGINT or
// SIGTERM arrives, unless app.WithoutSignals is in cfg.AppOptions), then shuts down
// gracefully (app.App.Run: HTTP, then consumers and the deadline sweeper, then the
// outbox relay, then connections and telemetry). At start it creates its database if
// missing, applies the library and order schemas and creates the saga's topics.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	return sagasvc.Run(ctx, sagasvc.Service{Name: "order", Schema: Schema, App: cfg.App, Group: cfg.Group,
		Options: cfg.AppOptions, Setup: func(ctx context.Context, a *app.App) error { return setup(ctx, a, cfg) }})
}

func setup(ctx context.Context, a *app.App, cfg Config) error {
	svc, err := New(a.Pool, cfg.Settings,
		WithLogger(a.Logger),
		WithTracerProvider(a.Telemetry.TracerProvider),
		WithMeterProvider(a.Telemetry.MeterProvider),
		WithOutbox(a.Outbox),
		WithPublisher(a),
		WithIdempotencyStore(a.Store),
		WithMaxPending(cfg.MaxPending))
	if err != nil {
		return err
	}
	// Admission control covers every API route (GETs hold a pool connection too), not
	// /healthz, /readyz or /metrics, which are registered by app. It runs before the
	// route's span and request deadline (app.WithRouteAdmission), so that the requests
	// it sheds above saturation (most POSTs at 2-3x the peak) cost as little as possible.
	adm, err := admission.New(cfg.MaxInFlight,
		admission.WithLogger(a.Logger, 0),
		admission.WithMeterProvider(a.Telemetry.MeterProvider))
	if err != nil {
		return fmt.Errorf("ordersvc: %w", err)
	}
	if cfg.APIToken == "" && !app.Loopback(cfg.App.HTTPAddr) {
		a.Logger.WarnContext(ctx, "order: the API listens beyond loopback without a token: anyone who reaches "+
			cfg.App.HTTPAddr+" can create and cancel orders; set "+EnvAPIToken, "http_addr", cfg.App.HTTPAddr)
	}
	svc.Register(func(pattern string, h http.Handler) {
		a.HandleHTTP(pattern, app.RequireBearer(cfg.APIToken, h), app.WithRouteAdmission(adm))
	})
	svc.register(a)
	a.Go("deadline sweeper", svc.RunSweeper)
	a.Go("pending counter", svc.RunPendingCounter)
	s := svc.Settings()
	a.Logger.InfoContext(ctx, "order: configured",
		"saga_timeout", s.SagaTimeout.String(), "compensation_timeout", s.CompensationTimeout.String(),
		"compensation_retries", s.CompensationRetries,
		"stuck_after_pending", s.StuckAfter[Pending].String(), "stuck_after_cancelling", s.StuckAfter[Cancelling].String(),
		"sweep_interval", s.SweepInterval.String(), "max_pending", svc.MaxPending())
	return nil
}
