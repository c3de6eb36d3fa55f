package inventorysvc

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
	"github.com/choreo-saga/choreo/services/events"
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
	db       outbox.Beginner
	handlers *Handlers
	batch    int
}

// NewReconciler returns a reconciler over db that corrects through h.
func NewReconciler(db outbox.Beginner, h *Handlers) *Reconciler {
	return &Reconciler{db: db, handlers: h, batch: DefaultReconcileBatch}
}

// ReconcileOnce checks every unchecked outcome and every held payment older than
// OrphanAfter, batch by batch, and returns how many corrections and reports it made.
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

// batchOnce claims up to batch orders to look at, in one transaction: it marks as checked
// those whose outcome needs nothing, and reports the orphans (after the commit). Then it
// corrects each of the others in a transaction of its own (order row, reservation, stock
// in SKU order: the handlers' lock order), so a correction never holds the locks of
// several orders. It returns how many orders it looked at and how many corrections and
// reports it made.
func (r *Reconciler) batchOnce(ctx context.Context) (looked, fixed int, err error) {
	h := r.handlers
	var todo, orphans []string
	err = pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		todo, orphans, looked = todo[:0], orphans[:0], 0
		rows, err := tx.Query(ctx, `SELECT o.order_id, NOT o.checked,
				o.outcome IN ('REJECTED', 'CANCELLED') AND coalesce(r.status = 'reserved', false)
			FROM inventory_orders o LEFT JOIN inventory_reservations r ON r.order_id = o.order_id
			WHERE NOT o.checked
			   OR (o.held_data IS NOT NULL AND NOT o.orphan_reported AND o.held_at < now() - $2::bigint * interval '1 microsecond')
			ORDER BY o.updated_at LIMIT $1 FOR UPDATE OF o SKIP LOCKED`, r.batch, h.orphanAfter.Microseconds())
		if err != nil {
			return err
		}
		var (
			fine            []string
			id              string
			unchecked, need bool
		)
		if _, err := pgx.ForEachRow(rows, []any{&id, &unchecked, &need}, func() error {
			looked++
			switch {
			case !unchecked: // a held payment, never announced
				orphans = append(orphans, id)
			case need:
				todo = append(todo, id)
			default:
				fine = append(fine, id)
			}
			return nil
		}); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE inventory_orders SET checked = true WHERE order_id = ANY($1)`, fine); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE inventory_orders SET orphan_reported = true WHERE order_id = ANY($1)`, orphans)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("inventorysvc: reconcile: %w", err)
	}
	for _, id := range orphans {
		octx := tracing.WithEntity(tracing.WithCorrelationID(ctx, id), "order.id", id)
		r.count(octx, "orphan_authorization", id, slog.LevelError,
			"inventory: payment.authorized for an order the order service never announced; nothing reserved",
			slog.Duration("held_longer_than", h.orphanAfter))
		fixed++
	}
	for _, id := range todo {
		ok, err := r.correct(ctx, id)
		if err != nil {
			return looked, fixed, fmt.Errorf("inventorysvc: reconcile order %s: %w", id, err)
		}
		if ok {
			fixed++
		}
	}
	return looked, fixed, nil
}

// correct releases the reservation of one order whose outcome needs none, if it is still
// held, and marks the order checked.
func (r *Reconciler) correct(ctx context.Context, id string) (bool, error) {
	h := r.handlers
	fixed := false
	err := h.outbox.InTx(ctx, r.db, func(ctx context.Context, tx pgx.Tx) error {
		fixed = false
		var outcome, eventID, correlationID *string
		err := tx.QueryRow(ctx, `SELECT outcome, outcome_event_id, outcome_correlation_id FROM inventory_orders
			WHERE order_id = $1 AND NOT checked FOR UPDATE`, id).Scan(&outcome, &eventID, &correlationID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // another instance corrected it
		}
		if err != nil {
			return err
		}
		res, found, err := lockReservation(ctx, tx, id)
		if err != nil {
			return err
		}
		if found && res.status == StatusReserved && outcome != nil && *outcome != "CONFIRMED" {
			items, err := reservationItems(ctx, tx, id)
			if err != nil {
				return err
			}
			if err := give(ctx, tx, id, items); err != nil {
				return err
			}
			reason := ReasonReconciled + ": order " + *outcome
			if err := setStatus(ctx, tx, id, StatusReleased, reason); err != nil {
				return err
			}
			octx := tracing.WithEntity(tracing.WithCorrelationID(ctx, *correlationID), "order.id", id)
			cause := event.Event{ID: *eventID, CorrelationID: *correlationID}
			if err := h.emit(octx, tx, cause, events.StockReleased, events.StockV1{OrderID: id, Items: items, Reason: reason}); err != nil {
				return err
			}
			r.count(octx, "release_"+strings.ToLower(*outcome), id, slog.LevelWarn,
				"inventory: reconciliation released a reservation the order did not need", slog.String("outcome", *outcome))
			fixed = true
		}
		_, err = tx.Exec(ctx, `UPDATE inventory_orders SET checked = true WHERE order_id = $1`, id)
		return err
	})
	return fixed, err
}

// count counts one correction of kind and logs it, once.
func (r *Reconciler) count(ctx context.Context, kind, id string, level slog.Level, msg string, attrs ...any) {
	r.handlers.fixes.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", kind)))
	r.handlers.log.Log(ctx, level, msg, append([]any{slog.String("order_id", id), slog.String("kind", kind)}, attrs...)...)
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
			r.handlers.log.WarnContext(ctx, "inventory: reconciliation failed", slog.Any("error", err))
		}
	}
}
