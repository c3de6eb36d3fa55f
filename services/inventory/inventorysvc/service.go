package inventorysvc

import (
	"context"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/contract"
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

// produces holds the producers of the inventory service's events, by type.
var produces = map[string]app.Producer[events.StockV1]{
	events.StockReserved:    events.StockReservedEvent,
	events.StockUnavailable: events.StockUnavailableEvent,
	events.StockReleased:    events.StockReleasedEvent,
}

// register declares and routes the inventory service's events on a: it produces
// stock.reserved, stock.unavailable and stock.released; order.created,
// payment.authorized (v2, and v1 upcast to it), order.confirmed, the outcomes (order.rejected, order.cancelled)
// and order.cancel_requested are handled; the saga's other types on the topics it reads
// are ignored.
func (h *Handlers) register(a *app.App) {
	a.Produces(events.StockReservedEvent, events.StockUnavailableEvent, events.StockReleasedEvent)
	a.Router.Ignore(events.PaymentDeclined, events.PaymentRefunded)
	app.On(a, events.TopicOrders, events.OrderCreated, 1, h.OrderCreated)
	// snippet:start upcast
	app.On(a, events.TopicPayments, events.PaymentAuthorized, 2, h.PaymentAuthorized)
	app.Upcast(a, events.PaymentAuthorized, 1, 2, events.UpcastPaymentAuthorized)
	// snippet:end upcast
	app.On(a, events.TopicOrders, events.OrderConfirmed, 1, h.OrderConfirmed)
	app.On(a, events.TopicOrders, events.OrderRejected, 1, h.OrderOutcome)
	app.On(a, events.TopicOrders, events.OrderCancelled, 1, h.OrderOutcome)
	app.On(a, events.TopicOrders, events.OrderCancelRequested, 1, h.CancelRequested)
}

// Contracts returns the inventory service's declarations (what register declares), for
// the saga's catalogue.
func Contracts() []contract.Declaration {
	return app.Declarations("inventory", (&Handlers{}).register)
}
