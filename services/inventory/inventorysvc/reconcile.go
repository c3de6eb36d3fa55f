package inventorysvc

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
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/internal/batchjob"
	"github.com/choreo-saga/choreo/tracing"
)

// DefaultReconcileBatch is the most orders one reconciliation transaction checks.
const DefaultReconcileBatch = 100

// Reconciler corrects what the saga left behind, periodically:
//
//   - release_rejected, release_cancelled: a reservation still held (status reserved) by
//     an order whose announced outcome is REJECTED or CANCELLED is released by a forward
//     action through the normal path: its stock goes back, the reservation becomes
//     released and a stock.released (caused by the outcome event) is enqueued;
//   - orphan_authorization: a payment.authorized held longer than Config.OrphanAfter for
//     an order the order service never announced is reported (it has had no effect and
//     stays held; an announcement still reserves).
//
// Each correction is counted in MetricReconciliations by kind and logged once. Rows are
// claimed with FOR UPDATE SKIP LOCKED, so several instances can run it at once, each
// release runs in a transaction of its own, and an order is checked once: reserve refuses
// stock to an order whose outcome is known, so a checked order stays corrected.
type Reconciler struct {
	handlers *Handlers
	job      batchjob.Reconciliation
}

// NewReconciler returns a reconciler over db that corrects through h.
func NewReconciler(db migrate.Beginner, h *Handlers) *Reconciler {
	r := &Reconciler{handlers: h}
	r.job = batchjob.Reconciliation{DB: db, Outbox: h.outbox, Table: "inventory_orders",
		Size: DefaultReconcileBatch, Name: "inventorysvc: reconcile", Claim: r.claim, Correct: r.correct}
	return r
}

// ReconcileOnce checks every unchecked outcome and every held payment older than
// OrphanAfter, batch by batch, and returns how many corrections and reports it made.
func (r *Reconciler) ReconcileOnce(ctx context.Context) (int, error) {
	return r.job.Once(ctx)
}

// claim claims up to limit orders to look at, in the batch's claim transaction: it sorts
// out those whose outcome needs nothing (batchjob marks them checked), and reports the
// orphans (once the claim has committed). batchjob then corrects each of the others in
// a transaction of its own (order row, reservation, stock in SKU order: the handlers'
// lock order), so a correction never holds the locks of several orders.
func (r *Reconciler) claim(ctx context.Context, tx pgx.Tx, limit int) (batchjob.Claimed, error) {
	h := r.handlers
	var c batchjob.Claimed
	rows, err := tx.Query(ctx, `SELECT o.order_id, NOT o.checked,
			o.outcome IN ('REJECTED', 'CANCELLED') AND coalesce(r.status = 'reserved', false)
		FROM inventory_orders o LEFT JOIN inventory_reservations r ON r.order_id = o.order_id
		WHERE NOT o.checked
		   OR (o.held_data IS NOT NULL AND NOT o.orphan_reported AND o.held_at < now() - $2::bigint * interval '1 microsecond')
		ORDER BY o.updated_at LIMIT $1 FOR UPDATE OF o SKIP LOCKED`, limit, h.orphanAfter.Microseconds())
	if err != nil {
		return c, err
	}
	var (
		orphans         []string
		id              string
		unchecked, need bool
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &unchecked, &need}, func() error {
		c.Rows++
		switch {
		case !unchecked: // a held payment, never announced
			orphans = append(orphans, id)
		case need:
			c.Todo = append(c.Todo, id)
		default:
			c.Fine = append(c.Fine, id)
		}
		return nil
	}); err != nil {
		return c, err
	}
	if _, err := tx.Exec(ctx, `UPDATE inventory_orders SET orphan_reported = true WHERE order_id = ANY($1)`, orphans); err != nil {
		return c, err
	}
	c.Committed = func(ctx context.Context) int {
		for _, id := range orphans {
			octx := tracing.WithEntity(tracing.WithCorrelationID(ctx, id), "order.id", id)
			r.count(octx, "orphan_authorization", id, slog.LevelError,
				"inventory: payment.authorized for an order the order service never announced; nothing reserved",
				slog.Duration("held_longer_than", h.orphanAfter))
		}
		return len(orphans)
	}
	return c, nil
}

// correct releases the reservation of one order whose outcome needs none, if it is
// still held; batchjob has locked the order's row and marks it checked after.
func (r *Reconciler) correct(ctx context.Context, tx pgx.Tx, id string) (bool, error) {
	var outcome, eventID, correlationID *string
	if err := tx.QueryRow(ctx, `SELECT outcome, outcome_event_id, outcome_correlation_id FROM inventory_orders
		WHERE order_id = $1`, id).Scan(&outcome, &eventID, &correlationID); err != nil {
		return false, err
	}
	res, found, err := lockReservation(ctx, tx, id)
	if err != nil || !found || res.status != StatusReserved || outcome == nil || *outcome == "CONFIRMED" {
		return false, err
	}
	items, err := reservationItems(ctx, tx, id)
	if err != nil {
		return false, err
	}
	if err := give(ctx, tx, id, items); err != nil {
		return false, err
	}
	reason := ReasonReconciled + ": order " + *outcome
	if err := setStatus(ctx, tx, id, StatusReleased, reason); err != nil {
		return false, err
	}
	octx := tracing.WithEntity(tracing.WithCorrelationID(ctx, *correlationID), "order.id", id)
	cause := event.Event{ID: *eventID, CorrelationID: *correlationID}
	if err := r.handlers.emit(octx, tx, cause, events.StockReleased, events.StockV1{OrderID: id, Items: items, Reason: reason}); err != nil {
		return false, err
	}
	kind := "release_" + strings.ToLower(*outcome)
	consumer.AfterCommit(octx, tx, func() {
		r.count(octx, kind, id, slog.LevelWarn,
			"inventory: reconciliation released a reservation the order did not need", slog.String("outcome", *outcome))
	})
	return true, nil
}

// count counts one correction of kind and logs it, once; call it after the correction's
// commit.
func (r *Reconciler) count(ctx context.Context, kind, id string, level slog.Level, msg string, attrs ...any) {
	r.handlers.fixes.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", kind)))
	r.handlers.log.Log(ctx, level, msg, append([]any{slog.String("order_id", id), slog.String("kind", kind)}, attrs...)...)
}

// Run reconciles every interval until ctx is cancelled; errors are logged and retried at
// the next tick.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) error {
	return batchjob.Run(ctx, interval, r.ReconcileOnce,
		batchjob.Logs{Logger: r.handlers.log, Failed: "inventory: reconciliation failed"})
}
