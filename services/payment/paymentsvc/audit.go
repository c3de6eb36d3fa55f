package paymentsvc

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Querier runs queries; *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// OrderAudit is what payment did for one order.
type OrderAudit struct {
	Status   string
	Amount   int64 // order amount
	Charged  int64
	Refunded int64
	Charges  int // ledger charge rows (0 or 1)
	Refunds  int // ledger refund rows (0 or 1)
}

// Audit is a consistent snapshot of the payment database, for invariant checks.
type Audit struct {
	// InitialTotal is Σ initial_balance over all customers.
	InitialTotal int64
	// BalanceTotal is Σ balance.
	BalanceTotal int64
	// Captured is Σ (charged − refunded) over all orders: money taken and kept.
	Captured int64
	// Orders maps order id to what payment did for it.
	Orders map[string]OrderAudit
}

// Conserved reports whether money is conserved: Σ balances + Σ captured = Σ initial,
// and the ledger agrees with the order rows.
func (a Audit) Conserved() error {
	if a.BalanceTotal+a.Captured != a.InitialTotal {
		return fmt.Errorf("paymentsvc: money not conserved: balances %d + captured %d != initial %d",
			a.BalanceTotal, a.Captured, a.InitialTotal)
	}
	return nil
}

// TakeAudit reads an Audit in one repeatable-read transaction on db.
func TakeAudit(ctx context.Context, db interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}) (Audit, error) {
	a := Audit{Orders: map[string]OrderAudit{}}
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(initial_balance), 0)::bigint, coalesce(sum(balance), 0)::bigint FROM payment_customers`).
			Scan(&a.InitialTotal, &a.BalanceTotal); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT o.order_id, o.status, o.amount, o.charged_amount, o.refunded_amount,
				(SELECT count(*) FROM payment_ledger l WHERE l.order_id = o.order_id AND l.kind = 'charge'),
				(SELECT count(*) FROM payment_ledger l WHERE l.order_id = o.order_id AND l.kind = 'refund')
			FROM payment_orders o`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			var o OrderAudit
			if err := rows.Scan(&id, &o.Status, &o.Amount, &o.Charged, &o.Refunded, &o.Charges, &o.Refunds); err != nil {
				return err
			}
			a.Captured += o.Charged - o.Refunded
			a.Orders[id] = o
		}
		return rows.Err()
	})
	if err != nil {
		return Audit{}, fmt.Errorf("paymentsvc: audit: %w", err)
	}
	return a, nil
}
