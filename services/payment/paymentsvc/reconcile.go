package paymentsvc

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/tracing"
)

// DefaultReconcileBatch is the most order outcomes one reconciliation transaction checks.
const DefaultReconcileBatch = 100

// Reconciler refunds what an order that ended without needing it still holds: a charge
// (status authorized) of an order whose announced outcome is REJECTED or CANCELLED. Each
// correction is a forward action through the normal path (a refund in the ledger and a
// payment.refunded in the outbox, caused by the outcome event), counted in
// MetricReconciliations by kind (refund_rejected, refund_cancelled) and logged once.
//
// It checks each recorded outcome once (payment_order_outcomes.checked), claiming rows
// with FOR UPDATE SKIP LOCKED so several instances can run it at once; since OrderCreated
// charges nothing for an order whose outcome is known, a checked order stays corrected.
type Reconciler struct {
	db       outbox.Beginner
	handlers *Handlers
	batch    int
}

// NewReconciler returns a reconciler over db that corrects through h.
func NewReconciler(db outbox.Beginner, h *Handlers) *Reconciler {
	return &Reconciler{db: db, handlers: h, batch: DefaultReconcileBatch}
}

// ReconcileOnce checks every unchecked outcome, batch by batch, and returns how many
// corrections it made.
func (r *Reconciler) ReconcileOnce(ctx context.Context) (int, error) {
	total := 0
	for {
		checked, fixed, err := r.batchOnce(ctx)
		total += fixed
		if err != nil || checked < r.batch {
			return total, err
		}
	}
}

func (r *Reconciler) batchOnce(ctx context.Context) (checked, fixed int, err error) {
	h := r.handlers
	err = h.outbox.InTx(ctx, r.db, func(ctx context.Context, tx pgx.Tx) error {
		checked, fixed = 0, 0
		rows, err := tx.Query(ctx, `SELECT order_id, outcome, event_id, correlation_id FROM payment_order_outcomes
			WHERE NOT checked ORDER BY at LIMIT $1 FOR UPDATE SKIP LOCKED`, r.batch)
		if err != nil {
			return err
		}
		type outcome struct{ id, outcome, eventID, correlationID string }
		outs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outcome, error) {
			var o outcome
			err := row.Scan(&o.id, &o.outcome, &o.eventID, &o.correlationID)
			return o, err
		})
		if err != nil {
			return err
		}
		for _, x := range outs {
			o, found, err := lockOrder(ctx, tx, x.id)
			if err != nil {
				return err
			}
			if found && o.status == StatusAuthorized && x.outcome != "CONFIRMED" {
				octx := tracing.WithEntity(tracing.WithCorrelationID(ctx, x.correlationID), "order.id", x.id)
				cause := event.Event{ID: x.eventID, CorrelationID: x.correlationID}
				if err := h.refund(octx, tx, cause, o, ReasonReconciled+": order "+x.outcome); err != nil {
					return err
				}
				kind := "refund_" + map[string]string{"REJECTED": "rejected", "CANCELLED": "cancelled"}[x.outcome]
				h.fixes.Add(octx, 1, metric.WithAttributes(attribute.String("kind", kind)))
				h.log.WarnContext(octx, "payment: reconciliation refunded a charge the order did not need",
					slog.String("order_id", x.id), slog.String("outcome", x.outcome), slog.String("kind", kind),
					slog.Int64("amount", o.charged-o.refunded))
				fixed++
			}
			if _, err := tx.Exec(ctx, `UPDATE payment_order_outcomes SET checked = true WHERE order_id = $1`, x.id); err != nil {
				return fmt.Errorf("paymentsvc: mark outcome checked: %w", err)
			}
		}
		checked = len(outs)
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("paymentsvc: reconcile: %w", err)
	}
	return checked, fixed, nil
}

// Run reconciles every interval until ctx is cancelled; errors are logged and retried at
// the next tick.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := r.ReconcileOnce(ctx); err != nil && ctx.Err() == nil {
			r.handlers.log.WarnContext(ctx, "payment: reconciliation failed", slog.Any("error", err))
		}
	}
}
