package inventorysvc

import (
	"context"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/internal/sagasvc"
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
	return sagasvc.Run(ctx, sagasvc.Service{Name: "inventory", Schema: Schema, App: cfg.App, Group: cfg.Group,
		Options: cfg.AppOptions, Setup: func(ctx context.Context, a *app.App) error { return setup(ctx, a, cfg) }})
}

func setup(ctx context.Context, a *app.App, cfg Config) error {
	if err := Seed(ctx, a.Pool, cfg.Stock); err != nil {
		return err
	}
	h, err := NewHandlers(a, a.Outbox, cfg, a.Logger, a.Telemetry.MeterProvider)
	if err != nil {
		return err
	}
	h.register(a)
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

// register routes the inventory service's events on a: order.created, payment.authorized,
// order.confirmed, the outcomes (order.rejected, order.cancelled) and
// order.cancel_requested are handled; the saga's other types on the topics it reads are
// ignored.
func (h *Handlers) register(a *app.App) {
	a.Router.Ignore(events.PaymentDeclined, events.PaymentRefunded)
	a.Handle(events.TopicOrders, events.OrderCreated, h.OrderCreated)
	a.Handle(events.TopicPayments, events.PaymentAuthorized, h.PaymentAuthorized)
	a.Handle(events.TopicOrders, events.OrderConfirmed, h.OrderConfirmed)
	a.Handle(events.TopicOrders, events.OrderRejected, h.OrderOutcome)
	a.Handle(events.TopicOrders, events.OrderCancelled, h.OrderOutcome)
	a.Handle(events.TopicOrders, events.OrderCancelRequested, h.CancelRequested)
}
