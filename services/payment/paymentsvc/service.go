package paymentsvc

import (
	"context"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/services/events"
)

// Run starts the payment service with cfg and blocks until ctx is cancelled (or SIGINT/
// SIGTERM arrives, unless app.WithoutSignals is in cfg.AppOptions), then shuts it down
// gracefully (see app.App.Run). At start it creates its database if missing, applies the
// library and payment schemas, seeds missing customers and creates the saga's topics;
// while running it also reconciles (see Reconciler).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	a, err := app.New(ctx, "payment", append([]app.Option{app.WithConfig(cfg.App), app.WithEntityAttribute("order.id"),
		app.WithSchema("payment", Schema), app.WithTopics(events.Topics...), app.WithGroup(cfg.Group),
		app.WithHandlerName("payment"), app.WithDeadLetterUnknownTypes()}, cfg.AppOptions...)...)
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
	if err := Seed(ctx, a.Pool, cfg.Customers); err != nil {
		return err
	}
	h, err := NewHandlers(a.Outbox, cfg, a.Logger, a.Telemetry.MeterProvider)
	if err != nil {
		return err
	}
	h.register(a)
	interval := cfg.ReconcileInterval
	if interval <= 0 {
		interval = DefaultReconcileInterval
	}
	rec := NewReconciler(a.Pool, h)
	a.Go("reconciliation", func(ctx context.Context) error { return rec.Run(ctx, interval) })
	a.Logger.InfoContext(ctx, "payment: configured", "reconcile_interval", interval.String(), "customers", len(cfg.Customers), "hang_customers", cfg.HangCustomers,
		"latency", cfg.Latency.String(), "failure_rate", cfg.FailureRate)
	return nil
}

// route is one event type the payment service handles, and the topic it comes from.
type route struct {
	topic, typ string
	h          consumer.TxHandler
}

// routes are the payment service's handlers (see Router).
func (h *Handlers) routes() []route {
	return []route{
		{events.TopicOrders, events.OrderCreated, h.OrderCreated},
		{events.TopicInventory, events.StockUnavailable, h.StockUnavailable},
		{events.TopicOrders, events.OrderCancelRequested, h.CancelRequested},
		{events.TopicOrders, events.OrderRejected, h.OrderOutcome},
		{events.TopicOrders, events.OrderCancelled, h.OrderOutcome},
	}
}

// ignored are the saga's types on the payment service's topics that it knowingly does
// not handle (see Router).
var ignored = []string{events.OrderConfirmed, events.StockReserved, events.StockReleased}

// register routes the payment service's events on a, as Router does.
func (h *Handlers) register(a *app.App) {
	events.Trust(a.Router).Ignore(ignored...)
	for _, rt := range h.routes() {
		a.Handle(rt.topic, rt.typ, rt.h)
	}
}
