package paymentsvc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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
// with FOR UPDATE SKIP LOCKED so several instances can run it at once, and corrects each
// order in a transaction of its own; since OrderCreated charges nothing for an order whose
// outcome is known, a checked order stays corrected.
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

// batchOnce claims up to batch unchecked outcomes and marks those that need nothing as
// checked, in one transaction; then corrects each of the others in a transaction of its
// own (outcome row, then order row, then customer: the order handlers' lock order), so a
// correction never holds the locks of several orders. It returns how many outcomes it
// looked at and how many it corrected.
func (r *Reconciler) batchOnce(ctx context.Context) (looked, fixed int, err error) {
	var todo []string
	err = pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		todo = todo[:0]
		rows, err := tx.Query(ctx, `SELECT x.order_id, x.outcome <> 'CONFIRMED' AND coalesce(p.status = 'authorized', false)
			FROM payment_order_outcomes x LEFT JOIN payment_orders p ON p.order_id = x.order_id
			WHERE NOT x.checked ORDER BY x.at LIMIT $1 FOR UPDATE OF x SKIP LOCKED`, r.batch)
		if err != nil {
			return err
		}
		var fine []string
		looked = 0
		var (
			id   string
			need bool
		)
		if _, err := pgx.ForEachRow(rows, []any{&id, &need}, func() error {
			looked++
			if need {
				todo = append(todo, id)
			} else {
				fine = append(fine, id)
			}
			return nil
		}); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE payment_order_outcomes SET checked = true WHERE order_id = ANY($1)`, fine)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("paymentsvc: reconcile: %w", err)
	}
	for _, id := range todo {
		ok, err := r.correct(ctx, id)
		if err != nil {
			return looked, fixed, fmt.Errorf("paymentsvc: reconcile order %s: %w", id, err)
		}
		if ok {
			fixed++
		}
	}
	return looked, fixed, nil
}

// correct refunds the charge of one order whose outcome needs none, if it is still there,
// and marks the outcome checked.
func (r *Reconciler) correct(ctx context.Context, id string) (bool, error) {
	h := r.handlers
	fixed := false
	err := h.outbox.InTx(ctx, r.db, func(ctx context.Context, tx pgx.Tx) error {
		fixed = false
		var outcome, eventID, correlationID string
		err := tx.QueryRow(ctx, `SELECT outcome, event_id, correlation_id FROM payment_order_outcomes
			WHERE order_id = $1 AND NOT checked FOR UPDATE`, id).Scan(&outcome, &eventID, &correlationID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // another instance corrected it
		}
		if err != nil {
			return err
		}
		o, found, err := lockOrder(ctx, tx, id)
		if err != nil {
			return err
		}
		if found && o.status == StatusAuthorized && outcome != "CONFIRMED" {
			octx := tracing.WithEntity(tracing.WithCorrelationID(ctx, correlationID), "order.id", id)
			cause := event.Event{ID: eventID, CorrelationID: correlationID}
			if err := h.refund(octx, tx, cause, o, ReasonReconciled+": order "+outcome); err != nil {
				return err
			}
			kind := "refund_" + strings.ToLower(outcome)
			h.fixes.Add(octx, 1, metric.WithAttributes(attribute.String("kind", kind)))
			h.log.WarnContext(octx, "payment: reconciliation refunded a charge the order did not need",
				slog.String("order_id", id), slog.String("outcome", outcome), slog.String("kind", kind),
				slog.Int64("amount", o.charged-o.refunded))
			fixed = true
		}
		_, err = tx.Exec(ctx, `UPDATE payment_order_outcomes SET checked = true WHERE order_id = $1`, id)
		return err
	})
	return fixed, err
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
