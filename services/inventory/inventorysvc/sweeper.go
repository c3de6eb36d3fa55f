package inventorysvc

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/internal/batchjob"
)

// DefaultSweepBatch is the most reservations one sweep transaction expires.
const DefaultSweepBatch = 100

// Sweeper releases reservations whose TTL passed without order.confirmed or a cancel:
// it returns their stock, marks them expired and emits stock.released (reason
// "reservation expired") for each, in one transaction per batch. Rows are claimed with
// FOR UPDATE SKIP LOCKED, so several instances can sweep at once, and a handler working
// on the same order (which locks the reservation row) is never overtaken.
type Sweeper struct {
	db       migrate.Beginner
	handlers *Handlers
	batch    int
}

// NewSweeper returns a sweeper over db that emits through h's outbox.
func NewSweeper(db migrate.Beginner, h *Handlers) *Sweeper {
	return &Sweeper{db: db, handlers: h, batch: DefaultSweepBatch}
}

// SweepOnce expires every reservation past its TTL, batch by batch, and returns how many
// it released.
func (s *Sweeper) SweepOnce(ctx context.Context) (int, error) {
	return batchjob.Drain(ctx, s.batch, s.sweepBatch)
}

// sweepBatch expires up to batch reservations past their TTL in one transaction and
// returns how many it claimed, all of which it released.
func (s *Sweeper) sweepBatch(ctx context.Context) (claimed, released int, err error) {
	n := 0
	err = s.handlers.outbox.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		// The batch's stock returns are summed per SKU and applied with the COMMIT
		// (InTx's hooks), in SKU order, as the consumer's transactions do (see "Stock
		// moves" in stock.go); the counts follow the commit.
		rows, err := tx.Query(ctx, `SELECT order_id FROM inventory_reservations
			WHERE status = 'reserved' AND expires_at < now()
			ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED`, s.batch)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, id := range ids {
			items, err := reservationItems(ctx, tx, id)
			if err != nil {
				return err
			}
			if err := give(ctx, tx, id, items); err != nil {
				return err
			}
			if err := setStatus(ctx, tx, id, StatusExpired, ReasonExpired); err != nil {
				return err
			}
			if err := s.handlers.emit(ctx, tx, event.Event{}, events.StockReleased,
				events.StockV1{OrderID: id, Items: items, Reason: ReasonExpired}); err != nil {
				return err
			}
			s.handlers.count(ctx, tx, "expire")
		}
		n = len(ids)
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("inventorysvc: sweep: %w", err)
	}
	return n, n, nil
}

// Run sweeps every interval until ctx is cancelled; errors are logged and retried at
// the next tick.
func (s *Sweeper) Run(ctx context.Context, interval time.Duration) error {
	return batchjob.Run(ctx, interval, s.SweepOnce, batchjob.Logs{Logger: s.handlers.log,
		Failed: "inventory: sweep failed", Done: "inventory: expired reservations released"})
}
