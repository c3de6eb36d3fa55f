package inventorysvc

import (
	"context"
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
// claimed with FOR UPDATE SKIP LOCKED, so several instances can run it at once, and an
// order is checked once: reserve refuses stock to an order whose outcome is known, so a
// checked order stays corrected.
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

func (r *Reconciler) batchOnce(ctx context.Context) (checked, fixed int, err error) {
	h := r.handlers
	err = h.outbox.InTx(ctx, r.db, func(ctx context.Context, tx pgx.Tx) error {
		checked, fixed = 0, 0
		rows, err := tx.Query(ctx, `SELECT order_id, outcome, outcome_event_id, outcome_correlation_id, NOT checked
			FROM inventory_orders
			WHERE NOT checked
			   OR (held_data IS NOT NULL AND NOT orphan_reported AND held_at < now() - $2::bigint * interval '1 microsecond')
			ORDER BY updated_at LIMIT $1 FOR UPDATE SKIP LOCKED`, r.batch, h.orphanAfter.Microseconds())
		if err != nil {
			return err
		}
		type row struct {
			id, eventID, correlationID string
			outcome                    *string
			unchecked                  bool
		}
		todo, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (row, error) {
			var x row
			err := cr.Scan(&x.id, &x.outcome, &x.eventID, &x.correlationID, &x.unchecked)
			return x, err
		})
		if err != nil {
			return err
		}
		for _, x := range todo {
			octx := tracing.WithEntity(tracing.WithCorrelationID(ctx, x.id), "order.id", x.id)
			if !x.unchecked { // a held payment, never announced
				if _, err := tx.Exec(ctx, `UPDATE inventory_orders SET orphan_reported = true WHERE order_id = $1`, x.id); err != nil {
					return fmt.Errorf("inventorysvc: report orphan: %w", err)
				}
				r.correct(octx, "orphan_authorization", x.id, slog.LevelError,
					"inventory: payment.authorized for an order the order service never announced; nothing reserved",
					slog.Duration("held_longer_than", h.orphanAfter))
				fixed++
				continue
			}
			if x.outcome != nil && *x.outcome != "CONFIRMED" {
				res, found, err := lockReservation(ctx, tx, x.id)
				if err != nil {
					return err
				}
				if found && res.status == StatusReserved {
					items, err := reservationItems(ctx, tx, x.id)
					if err != nil {
						return err
					}
					if err := give(ctx, tx, items); err != nil {
						return err
					}
					reason := ReasonReconciled + ": order " + *x.outcome
					if err := setStatus(ctx, tx, x.id, StatusReleased, reason); err != nil {
						return err
					}
					cause := event.Event{ID: x.eventID, CorrelationID: x.correlationID}
					if err := h.emit(octx, tx, cause, events.StockReleased, events.StockV1{OrderID: x.id, Items: items, Reason: reason}); err != nil {
						return err
					}
					r.correct(octx, "release_"+strings.ToLower(*x.outcome), x.id, slog.LevelWarn,
						"inventory: reconciliation released a reservation the order did not need", slog.String("outcome", *x.outcome))
					fixed++
				}
			}
			if _, err := tx.Exec(ctx, `UPDATE inventory_orders SET checked = true WHERE order_id = $1`, x.id); err != nil {
				return fmt.Errorf("inventorysvc: mark order checked: %w", err)
			}
		}
		checked = len(todo)
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("inventorysvc: reconcile: %w", err)
	}
	return checked, fixed, nil
}

// correct counts one correction of kind and logs it, once.
func (r *Reconciler) correct(ctx context.Context, kind, id string, level slog.Level, msg string, attrs ...any) {
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
