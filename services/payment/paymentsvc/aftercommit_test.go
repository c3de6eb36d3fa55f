package paymentsvc

import (
	"testing"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/internal/svctest"
)

// A charge whose COMMIT loses its connection is retried and counted once: the
// operation counter, the amount and the "authorized" log line follow the commit that
// happened, not the one that was attempted.
func TestChargeCountedOnceWhenCommitIsKilled(t *testing.T) {
	h := startService(t)
	commits := svctest.KillFirstCommit(t, h.Pool, "payment_ledger", "")
	o := "killed-" + testenv.Name(t, "o")
	h.Produce(events.TopicOrders, orderCreated(t, o, "c-1", 1_234))
	h.settled(events.TopicOrders)

	if n := commits(); n != 2 {
		t.Fatalf("%d commits reached the ledger trigger, want 2 (the killed one and its retry)", n)
	}
	if a := audit(t, h.Pool); a.Orders[o].Charges != 1 || a.Captured != 1_234 {
		t.Fatalf("ledger: %+v, captured %d; want one charge of 1234", a.Orders[o], a.Captured)
	}
	metrics := apptest.Metrics(t, h.BaseURL)
	if v := svctest.PromValue(metrics, "payment_amount_total", map[string]string{"op": "charge"}); v != 1_234 {
		t.Errorf("payment_amount_total{op=charge} = %v, want 1234\n%s", v, metrics)
	}
	if v := svctest.PromValue(metrics, "payment_operations_total", map[string]string{"op": "charge"}); v != 1 {
		t.Errorf("payment_operations_total{op=charge} = %v, want 1", v)
	}
	if n := svctest.LogCount(h.logs.Records(), "payment: authorized", map[string]string{"order.id": o}); n != 1 {
		t.Errorf("%d \"payment: authorized\" lines for %s, want 1:\n%s", n, o, h.logs.String())
	}
}
