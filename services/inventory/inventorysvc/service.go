package inventorysvc

import (
	"context"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/consumer"
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
	a, err := app.New(ctx, "inventory", append([]app.Option{app.WithConfig(cfg.App), app.WithEntityAttribute("order.id"),
		app.WithSchema("inventory", Schema), app.WithTopics(events.Topics...), app.WithGroup(cfg.Group),
		app.WithHandlerName("inventory"), app.WithDeadLetterUnknownTypes()}, cfg.AppOptions...)...)
	if err != nil {
		return err
	}
	if err := setup(ctx, a, cfg); err != nil {
		_ = a.Close()
		return err
	}
	return a.Run(ctx)
}

func setup(ctx context.Context, a *app.App, cfg Config) error {
	if err := Seed(ctx, a.Pool, cfg.Stock); err != nil {
		return err
	}
	h, err := NewHandlers(a.Outbox, cfg, a.Logger, a.Telemetry.MeterProvider)
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

// route is one event type the inventory service handles, and the topic it comes from.
type route struct {
	topic, typ string
	h          consumer.TxHandler
}

// routes are the inventory service's handlers (see Router).
func (h *Handlers) routes() []route {
	return []route{
		{events.TopicOrders, events.OrderCreated, h.OrderCreated},
		{events.TopicPayments, events.PaymentAuthorized, h.PaymentAuthorized},
		{events.TopicOrders, events.OrderConfirmed, h.OrderConfirmed},
		{events.TopicOrders, events.OrderRejected, h.OrderOutcome},
		{events.TopicOrders, events.OrderCancelled, h.OrderOutcome},
		{events.TopicOrders, events.OrderCancelRequested, h.CancelRequested},
	}
}

// ignored are the saga's types on the inventory service's topics that it knowingly does
// not handle (see Router).
var ignored = []string{events.PaymentDeclined, events.PaymentRefunded}

// register routes the inventory service's events on a, as Router does.
func (h *Handlers) register(a *app.App) {
	events.Trust(a.Router).Ignore(ignored...)
	for _, rt := range h.routes() {
		a.Handle(rt.topic, rt.typ, rt.h)
	}
}
