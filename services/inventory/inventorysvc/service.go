package inventorysvc

import (
	"context"
	"fmt"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/services/events"
)

// Run starts the inventory service with cfg and blocks until ctx is cancelled (or
// SIGINT/SIGTERM arrives, unless app.WithoutSignals is in cfg.AppOptions), then shuts it
// down gracefully (see app.App.Run). At start it creates its database if missing,
// applies the library and inventory schemas, seeds missing SKUs and creates the saga's
// topics; while running it also sweeps expired reservations and reconciles (see
// Reconciler).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	opts := append([]app.Option{app.WithEntityAttribute("order.id")}, cfg.AppOptions...)
	return app.Serve(ctx, cfg.App, func(ctx context.Context, a *app.App) error { return setup(ctx, a, cfg) }, opts...)
}

func setup(ctx context.Context, a *app.App, cfg Config) error {
	if err := a.Migrate(ctx, "inventory", Schema); err != nil {
		return err
	}
	if err := Seed(ctx, a.Pool, cfg.Stock); err != nil {
		return err
	}
	if err := a.EnsureTopics(ctx, events.Topics...); err != nil {
		return err
	}
	h, err := NewHandlers(a.Outbox, cfg, a.Logger, a.Telemetry.MeterProvider)
	if err != nil {
		return err
	}
	if err := a.Consume(app.ConsumerSpec{Group: cfg.Group, Topics: Topics, Router: h.Router(), Name: "inventory"}); err != nil {
		return fmt.Errorf("inventorysvc: %w", err)
	}
	sw := NewSweeper(a.Pool, h)
	a.Go("reservation sweeper", func(ctx context.Context) error { return sw.Run(ctx, cfg.SweepInterval) })
	interval := cfg.ReconcileInterval
	if interval <= 0 {
		interval = DefaultReconcileInterval
	}
	rec := NewReconciler(a.Pool, h)
	a.Go("reconciliation", func(ctx context.Context) error { return rec.Run(ctx, interval) })
	a.Logger.InfoContext(ctx, "inventory: configured", "skus", len(cfg.Stock), "reconcile_interval", interval.String(),
		"orphan_after", h.orphanAfter.String(),
		"reservation_ttl", cfg.ReservationTTL.String(), "sweep_interval", cfg.SweepInterval.String())
	return nil
}
