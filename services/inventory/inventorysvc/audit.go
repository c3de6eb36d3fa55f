package inventorysvc

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SKUAudit is the state of one SKU.
type SKUAudit struct {
	Initial   int64
	Available int64 // not spread yet plus in the shards (see StockShards)
	Reserved  int64 // held by reservations in status reserved
	Committed int64 // sold to confirmed orders
}

// OrderAudit is what inventory did for one order.
type OrderAudit struct {
	Status     string
	CancelSeen bool
	Reason     string
	Items      map[string]int64 // sku -> qty held (reserved/committed) or once held
}

// Audit is a consistent snapshot of the inventory database, for invariant checks.
type Audit struct {
	SKUs   map[string]SKUAudit
	Orders map[string]OrderAudit
}

// Conserved reports whether stock is conserved for every SKU:
// initial = available + reserved + committed.
func (a Audit) Conserved() error {
	for sku, s := range a.SKUs {
		if s.Initial != s.Available+s.Reserved+s.Committed {
			return fmt.Errorf("inventorysvc: stock of %s not conserved: initial %d != available %d + reserved %d + committed %d",
				sku, s.Initial, s.Available, s.Reserved, s.Committed)
		}
	}
	return nil
}

// TakeAudit reads an Audit in one repeatable-read transaction on db.
func TakeAudit(ctx context.Context, db interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}) (Audit, error) {
	a := Audit{SKUs: map[string]SKUAudit{}, Orders: map[string]OrderAudit{}}
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT s.sku, s.initial_qty,
				s.available + coalesce((SELECT sum(sh.available) FROM inventory_stock_shards sh WHERE sh.sku = s.sku), 0)::bigint,
				coalesce(sum(i.qty) FILTER (WHERE r.status = 'reserved'), 0)::bigint,
				coalesce(sum(i.qty) FILTER (WHERE r.status = 'committed'), 0)::bigint
			FROM inventory_stock s
			LEFT JOIN inventory_reservation_items i ON i.sku = s.sku
			LEFT JOIN inventory_reservations r ON r.order_id = i.order_id
			GROUP BY s.sku, s.initial_qty, s.available`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var sku string
			var s SKUAudit
			if err := rows.Scan(&sku, &s.Initial, &s.Available, &s.Reserved, &s.Committed); err != nil {
				return err
			}
			a.SKUs[sku] = s
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT r.order_id, r.status, r.cancel_seen, r.reason, i.sku, i.qty
			FROM inventory_reservations r LEFT JOIN inventory_reservation_items i ON i.order_id = r.order_id`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			var o OrderAudit
			var sku *string
			var qty *int64
			if err := rows.Scan(&id, &o.Status, &o.CancelSeen, &o.Reason, &sku, &qty); err != nil {
				return err
			}
			if prev, ok := a.Orders[id]; ok {
				o.Items = prev.Items
			} else {
				o.Items = map[string]int64{}
			}
			if sku != nil {
				o.Items[*sku] = *qty
			}
			a.Orders[id] = o
		}
		return rows.Err()
	})
	if err != nil {
		return Audit{}, fmt.Errorf("inventorysvc: audit: %w", err)
	}
	return a, nil
}
