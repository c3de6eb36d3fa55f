package inventorysvc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/services/events"
)

// StockShards is how many rows (inventory_stock_shards) hold the available stock of one
// SKU. See "Stock moves" below and docs/architecture.md, "Hot rows".
const StockShards = 16

// ErrStockChanged is returned (wrapped with a serialization failure, SQLSTATE 40001, so
// the consumer retries the record until it goes through, never dead-letters it) when the
// stock a transaction decided on was taken by a concurrent one before its commit. The
// retry reads the new levels and decides again.
var ErrStockChanged = errors.New("inventorysvc: stock changed concurrently")

// Stock moves. Every order of an SKU changes that SKU's stock: with one row per SKU, a
// row lock held from a handler's first statement to the commit serialised every
// transaction of that SKU (through the commit's disk flush), and a batch that locked
// the SKUs of its orders one order after the other locked them in no global order, so two
// batches could deadlock (a one-second wait for the deadlock detector each time).
//
// So the available stock of an SKU is split over StockShards rows of
// inventory_stock_shards (plus inventory_stock.available, stock not spread yet, which
// Seed spreads at every start). A transaction prefers one shard, chosen by the hash of
// the first order it moves stock for: a reservation takes from that shard and, when it
// has too little, from the next ones; a release goes back to it. Two transactions of
// different partitions therefore rarely touch the same row.
//
// And in a transaction run by the consumer (consumer.TxValue finds it), stock is never
// locked while the handlers run: take reads the preferred shard without a lock (every
// shard only when that one holds too little for the order), decides with them
// less what the transaction has already taken, and records the change; the changes of
// every handler of the transaction are summed per shard and applied once, by one
// conditional UPDATE (available + change >= 0) after the rows are locked in (SKU, shard)
// order, as the last statements before COMMIT (after the outbox rows). The lock is held
// for that UPDATE and the commit only, and all transactions lock in one order. If the
// UPDATE finds less stock than the decisions assumed (a concurrent transaction took it
// after the read), the transaction fails with ErrStockChanged, a serialization failure:
// nothing was written, the record is retried and decides again. Outside such a
// transaction (the reconciliation, tests calling a handler directly) the SKUs' shards
// are locked first and changed at once.
//
// Conservation, per SKU: initial_qty = inventory_stock.available + Σ shards' available +
// Σ qty of reservations in status reserved or committed (TakeAudit, Audit.Conserved).

type shardKey struct {
	sku   string
	shard int32
}

type stockKey struct{}   // the transaction's pending changes
type stockApply struct{} // their AtCommitFunc, added after the first outbox row

// pendingStock is a transaction's stock changes not yet applied (a consumer.TxValue):
// deferApply's AtCommitFunc, added after the outbox rows, applies them, so the stock rows
// are locked by the very last statements of the transaction.
type pendingStock struct {
	shard int32                // the preferred shard; -1 until the first order
	read  map[shardKey]int64   // available as last read in the transaction
	scope map[string]readScope // how much of each SKU was read (an SKU with no shard is unknown)
	delta map[shardKey]int64   // the transaction's net change
}

// readScope is how much of an SKU's stock a transaction has read.
//
// A transaction reads the preferred shard only, and every shard only when that one holds
// too little for the order: a read walks every version of the rows it reads that some
// snapshot may still see, and a snapshot held elsewhere on the database keeps every
// version of a hot SKU's shards (one per order since the snapshot was taken), so reading
// one shard walks a sixteenth of what reading all of them does (docs/benchmarks.md,
// "held snapshot").
type readScope uint8

const (
	preferredShard readScope = iota + 1 // the transaction's preferred shard
	everyShard                          // all StockShards shards
)

func newPending() *pendingStock {
	return &pendingStock{shard: -1, read: map[shardKey]int64{}, scope: map[string]readScope{}, delta: map[shardKey]int64{}}
}

// pending returns the pending changes of the consumer's transaction tx, or nil when ctx
// carries no hooks for tx.
func pending(ctx context.Context, tx pgx.Tx) *pendingStock {
	p, ok := consumer.TxValue(ctx, tx, stockKey{}, func() any { return newPending() })
	if !ok {
		return nil
	}
	return p.(*pendingStock)
}

// deferApply makes sure the pending changes are applied before the commit; call it after
// the handler enqueued its event, so that they come after the outbox rows.
func deferApply(ctx context.Context, tx pgx.Tx, p *pendingStock) error {
	if p == nil {
		return nil
	}
	return consumer.AtCommitFunc(ctx, tx, stockApply{}, func(b *pgx.Batch) { queueDeltas(b, p.delta) })
}

// prefer fixes the transaction's preferred shard from orderID, if it is not fixed yet.
func (p *pendingStock) prefer(orderID string) {
	if p.shard < 0 {
		h := fnv.New32a()
		h.Write([]byte(orderID))
		p.shard = int32(h.Sum32() % StockShards)
	}
}

// applyDeltas applies delta at once, in tx: queueDeltas' statement, in its own round trip.
func applyDeltas(ctx context.Context, tx pgx.Tx, delta map[shardKey]int64) error {
	b := &pgx.Batch{}
	queueDeltas(b, delta)
	return tx.SendBatch(ctx, b).Close()
}

// queueDeltas queues into b the statement that locks the changed shards' rows in (SKU,
// shard) order and applies delta (inventory_apply_stock, schema.sql), if anything
// changed. It fails with ErrStockChanged, a serialization failure, when a shard lacks the
// stock the transaction decided on.
func queueDeltas(b *pgx.Batch, delta map[shardKey]int64) {
	keys := make([]shardKey, 0, len(delta))
	for k, d := range delta {
		if d != 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	slices.SortFunc(keys, func(a, b shardKey) int { return cmp.Or(cmp.Compare(a.sku, b.sku), cmp.Compare(a.shard, b.shard)) })
	skus := make([]string, len(keys))
	shards := make([]int32, len(keys))
	ds := make([]int64, len(keys))
	for i, k := range keys {
		skus[i], shards[i], ds[i] = k.sku, k.shard, delta[k]
	}
	b.Queue(`SELECT inventory_apply_stock($1, $2, $3)`, skus, shards, ds).Fn = func(br pgx.BatchResults) error {
		_, err := br.Exec()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40001" { // serialization_failure, raised by the function
			return fmt.Errorf("%w: %w", ErrStockChanged, err)
		}
		if err != nil {
			return fmt.Errorf("inventorysvc: apply stock changes: %w", err)
		}
		return nil
	}
}

// queueLoad queues on b the (unlocked) read of the preferred shard (fixed from orderID if
// it is not fixed yet) of the SKUs of skus that the transaction has not read yet; they
// count as read once its result has been read. Nil pending changes (no consumer
// transaction) queue nothing.
func (p *pendingStock) queueLoad(b *pgx.Batch, orderID string, skus []string) {
	if p == nil {
		return
	}
	p.prefer(orderID)
	missing := p.unread(skus, preferredShard)
	if len(missing) == 0 {
		return
	}
	b.Queue(readShardSQL, missing, p.shard).Query(func(rows pgx.Rows) error { return p.store(rows, missing, preferredShard) })
}

// load reads scope of the SKUs of skus that the transaction has not read that far yet;
// lock (every shard only) locks their rows in (SKU, shard) order as it reads.
func (p *pendingStock) load(ctx context.Context, tx pgx.Tx, skus []string, scope readScope, lock bool) error {
	missing := p.unread(skus, scope)
	if len(missing) == 0 {
		return nil
	}
	q, args := readStockSQL, []any{missing}
	if scope == preferredShard {
		q, args = readShardSQL, append(args, p.shard)
	}
	if lock {
		q += ` ORDER BY sku, shard FOR NO KEY UPDATE`
	}
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("inventorysvc: read stock: %w", err)
	}
	return p.store(rows, missing, scope)
}

// readStockSQL reads the shards of the SKUs $1; readShardSQL their shard $2 only.
const (
	readStockSQL = `SELECT sku, shard, available FROM inventory_stock_shards WHERE sku = ANY($1)`
	readShardSQL = readStockSQL + ` AND shard = $2`
)

// unread returns the SKUs of skus the transaction has not read as far as scope, each
// once.
func (p *pendingStock) unread(skus []string, scope readScope) []string {
	var missing []string
	for _, sku := range skus {
		if p.scope[sku] < scope && !slices.Contains(missing, sku) {
			missing = append(missing, sku)
		}
	}
	return missing
}

// store keeps the levels rows (of readStockSQL or readShardSQL) read and marks skus as
// read as far as scope.
func (p *pendingStock) store(rows pgx.Rows, skus []string, scope readScope) error {
	var (
		k shardKey
		n int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&k.sku, &k.shard, &n}, func() error { p.read[k] = n; return nil }); err != nil {
		return fmt.Errorf("inventorysvc: read stock: %w", err)
	}
	for _, sku := range skus {
		p.scope[sku] = max(p.scope[sku], scope)
	}
	return nil
}

// short returns the SKUs of items (normalized) of which only the preferred shard was read
// and it holds less than the item's quantity.
func (p *pendingStock) short(items []events.Item) []string {
	var skus []string
	for _, it := range items {
		if p.scope[it.SKU] == everyShard {
			continue
		}
		if levels, _, _ := p.available(it.SKU); levels[p.shard] < int64(it.Qty) {
			skus = append(skus, it.SKU)
		}
	}
	return skus
}

// available returns the stock of the shards of sku the transaction has read, as it sees
// it, and whether any was found.
func (p *pendingStock) available(sku string) (levels [StockShards]int64, total int64, ok bool) {
	for i := range int32(StockShards) {
		k := shardKey{sku, i}
		n, found := p.read[k]
		if !found {
			continue
		}
		ok = true
		levels[i] = n + p.delta[k]
		total += levels[i]
	}
	return levels, total, ok
}

// take removes items (normalized) of orderID from stock, all or nothing. It returns a
// reason when the stock is not there (and changes nothing). See "Stock moves" above.
func take(ctx context.Context, tx pgx.Tx, orderID string, items []events.Item) (string, error) {
	skus, _ := split(items)
	p := pending(ctx, tx)
	deferred := p != nil
	if !deferred {
		p = newPending()
	}
	p.prefer(orderID)
	scope := preferredShard
	if !deferred {
		scope = everyShard // read and locked at once
	}
	if err := p.load(ctx, tx, skus, scope, !deferred); err != nil {
		return "", err
	}
	if short := p.short(items); len(short) > 0 {
		if err := p.load(ctx, tx, short, everyShard, false); err != nil {
			return "", err
		}
	}
	for _, it := range items {
		_, total, ok := p.available(it.SKU)
		switch {
		case !ok:
			return ReasonUnknownSKU + " " + it.SKU, nil
		case total < int64(it.Qty):
			return ReasonInsufficient + " for " + it.SKU, nil
		}
	}
	for _, it := range items {
		levels, _, _ := p.available(it.SKU)
		need := int64(it.Qty)
		for j := range int32(StockShards) {
			s := (p.shard + j) % StockShards
			if t := min(need, levels[s]); t > 0 {
				p.delta[shardKey{it.SKU, s}] -= t
				need -= t
			}
			if need == 0 {
				break
			}
		}
	}
	if deferred {
		return "", nil
	}
	return "", applyDeltas(ctx, tx, p.delta)
}

// give returns items of orderID to stock (at the end of the transaction when it is the
// consumer's; see "Stock moves" above).
func give(ctx context.Context, tx pgx.Tx, orderID string, items []events.Item) error {
	if len(items) == 0 {
		return nil
	}
	p := pending(ctx, tx)
	deferred := p != nil
	if !deferred {
		p = newPending()
	}
	p.prefer(orderID)
	for _, it := range items {
		p.delta[shardKey{it.SKU, p.shard}] += int64(it.Qty)
	}
	if deferred {
		return nil
	}
	return applyDeltas(ctx, tx, p.delta)
}

// spreadStock creates the StockShards shard rows of every SKU that lacks them and moves
// the stock not spread yet (inventory_stock.available: seeded stock, or stock an older
// version of the service left there) evenly into the shards. Each statement is atomic
// and a second run finds nothing to move.
func spreadStock(ctx context.Context, db migrate.Execer) error {
	if _, err := db.Exec(ctx, `INSERT INTO inventory_stock_shards (sku, shard, available)
		SELECT s.sku, g.shard, 0 FROM inventory_stock s CROSS JOIN generate_series(0, $1::int - 1) AS g(shard)
		ON CONFLICT (sku, shard) DO NOTHING`, StockShards); err != nil {
		return fmt.Errorf("inventorysvc: create stock shards: %w", err)
	}
	if _, err := db.Exec(ctx, `WITH old AS (
			SELECT sku, available FROM inventory_stock WHERE available > 0 ORDER BY sku FOR NO KEY UPDATE
		), moved AS (
			UPDATE inventory_stock s SET available = 0 FROM old WHERE s.sku = old.sku RETURNING old.sku, old.available
		)
		UPDATE inventory_stock_shards sh
		SET available = sh.available + m.available / $1::int + CASE WHEN sh.shard < m.available % $1::int THEN 1 ELSE 0 END
		FROM moved m WHERE sh.sku = m.sku AND sh.shard < $1::int`, StockShards); err != nil {
		return fmt.Errorf("inventorysvc: spread stock: %w", err)
	}
	return nil
}
