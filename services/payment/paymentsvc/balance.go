package paymentsvc

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/choreo-saga/choreo/consumer"
)

// ErrBalanceChanged is returned (wrapped with a serialization failure, SQLSTATE 40001, so
// the consumer retries the record until it goes through, never dead-letters it) when a
// customer's balance a transaction decided on was spent by a concurrent one before its
// commit. The retry reads the new balance and decides again.
var ErrBalanceChanged = errors.New("paymentsvc: balance changed concurrently")

// Balance moves. A customer's row in payment_customers is changed by every charge and
// refund of that customer; locked from the handler's first statement to the commit, it
// serialises the customer's transactions, and a batch that locked its customers one
// order after the other locked them in no global order, so two batches could deadlock.
//
// In a transaction run by the consumer (consumer.TxValue finds it) a charge therefore reads
// the balance without a lock and decides with it less what the transaction already
// charged; every handler's debits and credits are summed per customer and applied once,
// by one conditional UPDATE (balance + change >= 0) after the rows are locked in id
// order, as the last statements before COMMIT (after the outbox rows). If the balance
// went below what the decisions assumed, the transaction fails with ErrBalanceChanged (a
// serialization failure) and the record is retried. Elsewhere (the reconciliation,
// tests calling a handler directly) the row is locked and changed at once.

type balanceKey struct{}   // the transaction's pending changes
type balanceApply struct{} // their AtCommitFunc, added after the first outbox row

type customerRow struct{ balance, limit int64 }

// pendingBalances is a transaction's balance changes not yet applied (a TxValue);
// deferBalances' AtCommitFunc, added after the outbox rows, applies them.
type pendingBalances struct {
	read  map[string]customerRow // as first read in the transaction
	delta map[string]int64
}

func pendingFor(ctx context.Context, tx pgx.Tx) *pendingBalances {
	p, ok := consumer.TxValue(ctx, tx, balanceKey{}, func() any {
		return &pendingBalances{read: map[string]customerRow{}, delta: map[string]int64{}}
	})
	if !ok {
		return nil
	}
	return p.(*pendingBalances)
}

// deferBalances makes sure the pending changes are applied with the commit; called
// after the handler enqueued its event, so that they come after the outbox rows.
func deferBalances(ctx context.Context, tx pgx.Tx) error {
	p := pendingFor(ctx, tx)
	if p == nil {
		return nil
	}
	return consumer.AtCommitFunc(ctx, tx, balanceApply{}, func(b *pgx.Batch) { queueBalances(b, p.delta) })
}

// readCustomer returns the customer's balance (as this transaction will leave it) and
// charge limit; with no consumer transaction it locks the row. found is false for an
// unknown customer.
func readCustomer(ctx context.Context, tx pgx.Tx, id string) (c customerRow, found bool, err error) {
	p := pendingFor(ctx, tx)
	if p != nil {
		if c, ok := p.read[id]; ok {
			c.balance += p.delta[id]
			return c, true, nil
		}
	}
	q := `SELECT balance, charge_limit FROM payment_customers WHERE id = $1`
	if p == nil {
		q += ` FOR UPDATE`
	}
	err = tx.QueryRow(ctx, q, id).Scan(&c.balance, &c.limit)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return c, false, nil
	case err != nil:
		return c, false, fmt.Errorf("paymentsvc: read customer: %w", err)
	}
	if p != nil {
		p.read[id] = c
		c.balance += p.delta[id]
	}
	return c, true, nil
}

// changeBalance adds d to the customer's balance: at the end of the transaction when it
// is the consumer's, at once otherwise.
// seedCustomer gives the transaction's balance moves the customer's row as the
// transaction first read it, when the handler already read it with another statement:
// readCustomer then needs no round trip of its own. Outside a consumer transaction (no
// hooks) it does nothing and readCustomer reads and locks the row itself.
func seedCustomer(ctx context.Context, tx pgx.Tx, id string, c customerRow) {
	if p := pendingFor(ctx, tx); p != nil {
		if _, ok := p.read[id]; !ok {
			p.read[id] = c
		}
	}
}

func changeBalance(ctx context.Context, tx pgx.Tx, id string, d int64) error {
	if p := pendingFor(ctx, tx); p != nil {
		p.delta[id] += d
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE payment_customers SET balance = balance + $2 WHERE id = $1`, id, d); err != nil {
		return fmt.Errorf("paymentsvc: change balance: %w", err)
	}
	return nil
}

// queueBalances queues into b the statement that locks the changed customers' rows in id
// order and applies delta (payment_apply_balances, schema.sql), if anything changed. It
// fails with ErrBalanceChanged, a serialization failure, when a customer lacks the balance
// the transaction decided on.
func queueBalances(b *pgx.Batch, delta map[string]int64) {
	ids := make([]string, 0, len(delta))
	for id, d := range delta {
		if d != 0 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	ds := make([]int64, len(ids))
	for i, id := range ids {
		ds[i] = delta[id]
	}
	b.Queue(`SELECT payment_apply_balances($1, $2)`, ids, ds).Fn = func(br pgx.BatchResults) error {
		_, err := br.Exec()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40001" { // serialization_failure, raised by the function
			return fmt.Errorf("%w: %w", ErrBalanceChanged, err)
		}
		if err != nil {
			return fmt.Errorf("paymentsvc: apply balance changes: %w", err)
		}
		return nil
	}
}
