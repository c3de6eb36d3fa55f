package inventorysvc

import (
	"context"
	"errors"
	"github.com/choreo-saga/choreo/app"
	"testing"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/internal/svctest"
)

// In a consumer transaction the orders of a batch see each other's takes before
// anything is written, and the summed change is applied at the end.
func TestBatchTakesSeeEachOther(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t)
	for _, o := range []string{"o-1", "o-2", "o-3"} {
		announce(t, pool, h, o, item("sku-2", 2))
	}
	err := svctest.InBatch(pool, app.Decoded(h.PaymentAuthorized), nil,
		authorized(t, "o-1", item("sku-2", 2)), authorized(t, "o-2", item("sku-2", 2)), authorized(t, "o-3", item("sku-2", 2)))
	if err != nil {
		t.Fatal(err)
	}
	a := audit(t, pool)
	if a.Orders["o-1"].Status != StatusReserved || a.Orders["o-2"].Status != StatusReserved || a.Orders["o-3"].Status != StatusUnavailable {
		t.Fatalf("orders: %+v", a.Orders)
	}
	if a.SKUs["sku-2"].Available != 1 || a.SKUs["sku-2"].Reserved != 4 {
		t.Fatalf("sku-2: %+v", a.SKUs["sku-2"])
	}
	// A release in a batch goes back, too.
	if err := svctest.InBatch(pool, app.Decoded(h.CancelRequested), nil, cancelRequested(t, "o-1")); err != nil {
		t.Fatal(err)
	}
	if a := audit(t, pool); a.SKUs["sku-2"].Available != 3 || a.Orders["o-1"].Status != StatusReleased {
		t.Fatalf("after release: %+v %+v", a.SKUs["sku-2"], a.Orders["o-1"])
	}
}

// A batch whose stock was taken by a concurrent transaction between its read and its
// commit fails as a serialization failure (retried as an outage, never dead-lettered)
// and writes nothing; handled again, it decides on the new level.
func TestBatchStockConflictIsRetried(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t)
	announce(t, pool, h, "o-1", item("sku-2", 5))
	announce(t, pool, h, "o-2", item("sku-2", 5))
	err := svctest.InBatch(pool, app.Decoded(h.PaymentAuthorized), func() {
		apptest.MustHandle(t, pool, app.Decoded(h.PaymentAuthorized), authorized(t, "o-2", item("sku-2", 5)))
	}, authorized(t, "o-1", item("sku-2", 5)))
	if !errors.Is(err, ErrStockChanged) || !consumer.IsOutage(err) {
		t.Fatalf("err = %v, want ErrStockChanged, an outage", err)
	}
	if a := audit(t, pool); a.Orders["o-1"].Status != "" || a.Orders["o-2"].Status != StatusReserved {
		t.Fatalf("orders: %+v", a.Orders)
	}
	if err := svctest.InBatch(pool, app.Decoded(h.PaymentAuthorized), nil, authorized(t, "o-1", item("sku-2", 5))); err != nil {
		t.Fatal(err)
	}
	if a := audit(t, pool); a.Orders["o-1"].Status != StatusUnavailable || a.SKUs["sku-2"].Available != 0 {
		t.Fatalf("after retry: %+v %+v", a.Orders["o-1"], a.SKUs["sku-2"])
	}
}

// A database of a version without shards (stock in inventory_stock.available) is
// upgraded at start: Seed spreads the stock over the shards, conserved, once.
func TestSeedSpreadsOldStock(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `UPDATE inventory_stock SET available = available + 37, initial_qty = initial_qty + 37 WHERE sku = 'sku-1'`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := Seed(ctx, pool, testStock); err != nil {
			t.Fatal(err)
		}
	}
	var left, shards, rows int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT available FROM inventory_stock WHERE sku = 'sku-1'),
		(SELECT sum(available) FROM inventory_stock_shards WHERE sku = 'sku-1'),
		(SELECT count(*) FROM inventory_stock_shards WHERE sku = 'sku-1')`).Scan(&left, &shards, &rows); err != nil {
		t.Fatal(err)
	}
	if left != 0 || shards != 47 || rows != StockShards {
		t.Fatalf("sku-1: %d not spread, %d in %d shards; want 0, 47 in %d", left, shards, rows, StockShards)
	}
	if a := audit(t, pool); a.SKUs["sku-1"].Available != 47 {
		t.Fatalf("sku-1: %+v", a.SKUs["sku-1"])
	}
}

// In a consumer transaction, payment.authorized of an announced order takes two round
// trips: one reads and locks the order, reads whether it has a reservation and reads the
// stock of its SKUs (the preferred shard, which holds enough); one records the
// reservation (the outbox row and the stock move are written at commit). A second order
// of an SKU already read does not read it again.
func TestPaymentAuthorizedRoundTrips(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t)
	announce(t, pool, h, "o-1", item("sku-9", 2))
	announce(t, pool, h, "o-2", item("sku-9", 1))
	announce(t, pool, h, "o-3", item("sku-9", 100))
	n, err := svctest.InCountedBatch(pool, app.Decoded(h.PaymentAuthorized), authorized(t, "o-1", item("sku-9", 2)))
	if err != nil || n != 2 {
		t.Fatalf("one order: %d round trips, %v; want 2", n, err)
	}
	n, err = svctest.InCountedBatch(pool, app.Decoded(h.PaymentAuthorized),
		authorized(t, "o-2", item("sku-9", 1)), authorized(t, "o-3", item("sku-9", 100)))
	if err != nil || n != 4 {
		t.Fatalf("two orders: %d round trips, %v; want 4", n, err)
	}
	a := audit(t, pool)
	if a.Orders["o-1"].Status != StatusReserved || a.Orders["o-2"].Status != StatusReserved || a.Orders["o-3"].Status != StatusReserved {
		t.Fatalf("orders: %+v", a.Orders)
	}
	if a.SKUs["sku-9"].Available != 1_897 || a.SKUs["sku-9"].Reserved != 103 {
		t.Fatalf("stock: %+v", a.SKUs)
	}
	if err := a.Conserved(); err != nil {
		t.Fatal(err)
	}
	// A redelivery under another id finds the reservation (read, then locked) and
	// changes nothing.
	if err := svctest.InBatch(pool, app.Decoded(h.PaymentAuthorized), nil, authorized(t, "o-1", item("sku-9", 2))); err != nil {
		t.Fatal(err)
	}
	if b := audit(t, pool); b.SKUs["sku-9"] != a.SKUs["sku-9"] {
		t.Fatalf("redelivery moved stock: %+v -> %+v", a.SKUs, b.SKUs)
	}
}

// A payment.authorized that overtakes its order.created is held in two round trips (the
// read that finds no order, the insert of the order's row holding it); the order.created
// then reserves for it without locking a reservation that is not there: its upsert, the
// release of the held event, the stock read (the preferred shard holds enough) and the
// reservation.
func TestHeldPaymentRoundTrips(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t)
	pa := authorized(t, "o-1", item("sku-9", 2))
	n, err := svctest.InCountedBatch(pool, app.Decoded(h.PaymentAuthorized), pa)
	if err != nil || n != 2 {
		t.Fatalf("held: %d round trips, %v; want 2", n, err)
	}
	if a := audit(t, pool); a.SKUs["sku-9"].Available != 2_000 || len(outboxEvents(t, pool)) != 0 {
		t.Fatalf("a held payment changed inventory: %+v", a)
	}
	n, err = svctest.InCountedBatch(pool, app.Decoded(h.PaymentAuthorized), authorized(t, "o-1", item("sku-9", 2))) // redelivered
	if err != nil || n != 1 {
		t.Fatalf("held again: %d round trips, %v; want 1", n, err)
	}
	n, err = svctest.InCountedBatch(pool, app.Decoded(h.OrderCreated), created(t, "o-1", item("sku-9", 2)))
	if err != nil || n != 4 {
		t.Fatalf("announced: %d round trips, %v; want 4", n, err)
	}
	a := audit(t, pool)
	if a.Orders["o-1"].Status != StatusReserved || a.SKUs["sku-9"].Available != 1_998 || a.SKUs["sku-9"].Reserved != 2 {
		t.Fatalf("audit %+v", a)
	}
	if got := outboxEvents(t, pool); len(got) != 1 || got[0].Type != events.StockReserved || got[0].CausationID != pa.ID {
		t.Fatalf("events %+v", got)
	}
	var held int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM inventory_orders WHERE held_event_id IS NOT NULL`).Scan(&held); err != nil || held != 0 {
		t.Fatalf("held rows %d, %v", held, err)
	}
}

// A transaction reads its preferred shard of an SKU only, unless that shard holds less
// than the order needs: then it reads every shard, in one more round trip, and takes
// from as many as it needs.
func TestTakeReadsEveryShardOnlyWhenPreferredIsShort(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t)
	announce(t, pool, h, "o-ample", item("sku-9", 3))
	announce(t, pool, h, "o-short", item("sku-1", 3)) // 10 over 16 shards: at most 1 each
	ample, err := svctest.InCountedBatch(pool, app.Decoded(h.PaymentAuthorized), authorized(t, "o-ample", item("sku-9", 3)))
	if err != nil {
		t.Fatal(err)
	}
	short, err := svctest.InCountedBatch(pool, app.Decoded(h.PaymentAuthorized), authorized(t, "o-short", item("sku-1", 3)))
	if err != nil {
		t.Fatal(err)
	}
	if short != ample+1 {
		t.Fatalf("round trips: %d with the preferred shard short, %d with it ample; want one more", short, ample)
	}
	a := audit(t, pool)
	if a.Orders["o-ample"].Status != StatusReserved || a.Orders["o-short"].Status != StatusReserved {
		t.Fatalf("orders: %+v", a.Orders)
	}
	if a.SKUs["sku-1"].Available != 7 || a.SKUs["sku-9"].Available != 1_997 {
		t.Fatalf("stock: %+v", a.SKUs)
	}
	if err := a.Conserved(); err != nil {
		t.Fatal(err)
	}
	var touched int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM inventory_stock_shards
		WHERE sku = 'sku-9' AND available <> 125`).Scan(&touched); err != nil || touched != 1 {
		t.Fatalf("sku-9 shards changed: %d (%v), want the preferred one only", touched, err)
	}
}
