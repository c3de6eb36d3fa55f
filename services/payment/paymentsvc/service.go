package paymentsvc

import (
	"context"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/internal/sagasvc"
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
	return sagasvc.Run(ctx, sagasvc.Service{Name: "payment", Schema: Schema, App: cfg.App, Group: cfg.Group,
		Options: cfg.AppOptions, Setup: func(ctx context.Context, a *app.App) error { return setup(ctx, a, cfg) }})
}

func setup(ctx context.Context, a *app.App, cfg Config) error {
	if err := Seed(ctx, a.Pool, cfg.Customers); err != nil {
		return err
	}
	h, err := NewHandlers(a, a.Outbox, cfg, a.Logger, a.Telemetry.MeterProvider)
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

// produces holds the producers of the payment service's events, by type.
var produces = map[string]app.Producer[events.PaymentV1]{
	events.PaymentAuthorized: events.PaymentAuthorizedEvent,
	events.PaymentDeclined:   events.PaymentDeclinedEvent,
	events.PaymentRefunded:   events.PaymentRefundedEvent,
}

// register declares and routes the payment service's events on a: it produces
// payment.authorized (v1 and v2, see Config.AuthorizedVersion), payment.declined and
// payment.refunded; order.created,
// stock.unavailable and order.cancel_requested are handled, the outcomes that need no
// charge (order.rejected, order.cancelled) are recorded; the saga's other types on the
// topics it reads are ignored, order.confirmed included (a confirmed order keeps its
// charge, so recording it would cost a transaction per order for nothing).
func (h *Handlers) register(a *app.App) {
	a.Produces(events.PaymentAuthorizedEvent, events.PaymentAuthorizedV2Event, events.PaymentDeclinedEvent, events.PaymentRefundedEvent)
	a.Router.Ignore(events.OrderConfirmed, events.StockReserved, events.StockReleased)
	app.On(a, events.TopicOrders, events.OrderCreated, 1, h.OrderCreated)
	app.On(a, events.TopicInventory, events.StockUnavailable, 1, h.StockUnavailable)
	app.On(a, events.TopicOrders, events.OrderCancelRequested, 1, h.CancelRequested)
	app.On(a, events.TopicOrders, events.OrderRejected, 1, h.OrderOutcome)
	app.On(a, events.TopicOrders, events.OrderCancelled, 1, h.OrderOutcome)
}

// Contracts returns the payment service's declarations (what register declares), for
// the saga's catalogue.
func Contracts() []contract.Declaration {
	return app.Declarations("payment", (&Handlers{}).register)
}
