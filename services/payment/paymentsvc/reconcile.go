package paymentsvc

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/services/internal/batchjob"
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
	handlers *Handlers
	job      batchjob.Reconciliation
}

// NewReconciler returns a reconciler over db that corrects through h.
func NewReconciler(db migrate.Beginner, h *Handlers) *Reconciler {
	r := &Reconciler{handlers: h}
	r.job = batchjob.Reconciliation{DB: db, Outbox: h.outbox, Table: "payment_order_outcomes",
		Size: DefaultReconcileBatch, Name: "paymentsvc: reconcile", Claim: r.claim, Correct: r.correct}
	return r
}

// ReconcileOnce checks every unchecked outcome, batch by batch, and returns how many
// corrections it made.
func (r *Reconciler) ReconcileOnce(ctx context.Context) (int, error) {
	return r.job.Once(ctx)
}

// claim claims up to limit unchecked outcomes in the batch's claim transaction and sorts
// out those that need nothing (batchjob marks them checked); batchjob then corrects each
// of the others in a transaction of its own (outcome row, then order row, then customer:
// the order handlers' lock order), so a correction never holds the locks of several
// orders.
func (r *Reconciler) claim(ctx context.Context, tx pgx.Tx, limit int) (batchjob.Claimed, error) {
	rows, err := tx.Query(ctx, `SELECT x.order_id, x.outcome <> 'CONFIRMED' AND coalesce(p.status = 'authorized', false)
		FROM payment_order_outcomes x LEFT JOIN payment_orders p ON p.order_id = x.order_id
		WHERE NOT x.checked ORDER BY x.at LIMIT $1 FOR UPDATE OF x SKIP LOCKED`, limit)
	if err != nil {
		return batchjob.Claimed{}, err
	}
	return batchjob.Sort(rows)
}

// correct refunds the charge of one order whose outcome needs none, if it is still
// there; batchjob has locked the order's outcome row and marks it checked after.
func (r *Reconciler) correct(ctx context.Context, tx pgx.Tx, id string) (bool, error) {
	h := r.handlers
	var outcome, eventID, correlationID string
	if err := tx.QueryRow(ctx, `SELECT outcome, event_id, correlation_id FROM payment_order_outcomes
		WHERE order_id = $1`, id).Scan(&outcome, &eventID, &correlationID); err != nil {
		return false, err
	}
	o, found, err := lockOrder(ctx, tx, id)
	if err != nil || !found || o.status != StatusAuthorized || outcome == "CONFIRMED" {
		return false, err
	}
	octx := tracing.WithEntity(tracing.WithCorrelationID(ctx, correlationID), "order.id", id)
	cause := event.Event{ID: eventID, CorrelationID: correlationID}
	if err := h.refund(octx, tx, cause, o, ReasonReconciled+": order "+outcome); err != nil {
		return false, err
	}
	kind := "refund_" + strings.ToLower(outcome)
	consumer.AfterCommit(octx, tx, func() { h.fixes.Add(octx, 1, metric.WithAttributes(attribute.String("kind", kind))) })
	h.note(octx, tx, slog.LevelWarn, "payment: reconciliation refunded a charge the order did not need",
		slog.String("order_id", id), slog.String("outcome", outcome), slog.String("kind", kind),
		slog.Int64("amount", o.charged-o.refunded))
	return true, nil
}

// Run reconciles every interval until ctx is cancelled; errors are logged and retried at
// the next tick.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) error {
	return batchjob.Run(ctx, interval, r.ReconcileOnce,
		batchjob.Logs{Logger: r.handlers.log, Failed: "payment: reconciliation failed"})
}
