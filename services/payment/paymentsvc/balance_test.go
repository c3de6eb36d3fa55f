package paymentsvc

import (
	"errors"
	"github.com/choreo-saga/choreo/app"
	"testing"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/services/internal/svctest"
)

// The charges of one customer in a batch see each other before anything is written:
// the one the balance no longer covers is declined; the sum is debited once.
func TestBatchChargesSeeEachOther(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t, nil)
	err := svctest.InBatch(pool, app.Decoded(h.OrderCreated), nil,
		orderCreated(t, "o-1", "c-1", 40_000), orderCreated(t, "o-2", "c-1", 40_000), orderCreated(t, "o-3", "c-1", 40_000))
	if err != nil {
		t.Fatal(err)
	}
	if b := balance(t, pool, "c-1"); b != 20_000 {
		t.Fatalf("balance %d, want 20000", b)
	}
	audit(t, pool)
	if err := svctest.InBatch(pool, app.Decoded(h.StockUnavailable), nil, stockUnavailable(t, "o-1")); err != nil {
		t.Fatal(err)
	}
	if b := balance(t, pool, "c-1"); b != 60_000 {
		t.Fatalf("balance after refund %d, want 60000", b)
	}
	audit(t, pool)
}

// A batch whose customer's balance was spent by a concurrent transaction between its
// read and its commit fails as a serialization failure (an outage: retried, never
// dead-lettered) and writes nothing; handled again, it decides on the new balance.
func TestBatchBalanceConflictIsRetried(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t, nil)
	apptest.MustHandle(t, pool, app.Decoded(h.OrderCreated), orderCreated(t, "o-0", "c-1", 50_000))
	err := svctest.InBatch(pool, app.Decoded(h.OrderCreated), func() {
		apptest.MustHandle(t, pool, app.Decoded(h.OrderCreated), orderCreated(t, "o-2", "c-1", 40_000))
	}, orderCreated(t, "o-1", "c-1", 40_000))
	if !errors.Is(err, ErrBalanceChanged) || !consumer.IsOutage(err) {
		t.Fatalf("err = %v, want ErrBalanceChanged, an outage", err)
	}
	if b := balance(t, pool, "c-1"); b != 10_000 {
		t.Fatalf("balance %d, want 10000", b)
	}
	if err := svctest.InBatch(pool, app.Decoded(h.OrderCreated), nil, orderCreated(t, "o-1", "c-1", 40_000)); err != nil {
		t.Fatal(err)
	}
	if a := audit(t, pool); a.Orders["o-1"].Status != StatusDeclined {
		t.Fatalf("o-1 after retry: %+v", a.Orders["o-1"])
	}
}
