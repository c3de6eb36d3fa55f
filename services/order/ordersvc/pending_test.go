package ordersvc_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

// TestMaxPending: with the limit at 3 and 3 orders in flight in the saga (one of them
// CANCELLING), a new order is refused with 503 overloaded and nothing is written (the
// same Idempotency-Key creates its order later); a replay of an existing key still
// returns its order; once orders settle, creations succeed again.
func TestMaxPending(t *testing.T) {
	const limit = 3
	f := newFixture(t, ordersvc.Settings{}, ordersvc.WithMaxPending(limit))
	if f.svc.MaxPending() != limit {
		t.Fatalf("MaxPending %d", f.svc.MaxPending())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.svc.RunPendingCounter(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	var first ordersvc.OrderJSON
	if resp := f.do(t, "POST", "/orders", validBody, map[string]string{"Idempotency-Key": "k-first"}, &first); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first create: status %d", resp.StatusCode)
	}
	second, third := f.create(t), f.create(t)
	if resp := f.do(t, "POST", "/orders/"+third.ID+"/cancel", "", nil, nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: status %d", resp.StatusCode)
	}
	// The instance counts its own creations at once; the refresh (CANCELLING counts
	// too) agrees.
	if n := f.svc.Pending(); n < limit {
		t.Fatalf("pending %d right after %d creations", n, limit)
	}
	waitPending(t, f.svc, func(n int64) bool { return n == limit })

	countOrders := func() int {
		var n int
		if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM orders`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, key := range []string{"", "k-new"} {
		h := map[string]string{}
		if key != "" {
			h["Idempotency-Key"] = key
		}
		var e ordersvc.ErrorJSON
		resp := f.do(t, "POST", "/orders", validBody, h, &e)
		if resp.StatusCode != http.StatusServiceUnavailable || e.Error.Code != ordersvc.CodeOverloaded || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("key %q at the limit: status %d, code %q, Retry-After %q", key, resp.StatusCode, e.Error.Code, resp.Header.Get("Retry-After"))
		}
	}
	if n := countOrders(); n != limit {
		t.Fatalf("%d orders after the refusals, want %d", n, limit)
	}
	if n := f.svc.ShedByPending(); n != 2 {
		t.Fatalf("ShedByPending %d, want 2", n)
	}
	var claims int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM choreo_idempotency WHERE key = 'k-new'`).Scan(&claims); err != nil || claims != 0 {
		t.Fatalf("idempotency records of the refused key: %d (%v), want 0", claims, err)
	}

	var replay ordersvc.OrderJSON
	resp := f.do(t, "POST", "/orders", validBody, map[string]string{"Idempotency-Key": "k-first"}, &replay)
	if resp.StatusCode != http.StatusOK || replay.ID != first.ID || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay at the limit: status %d, id %s, want 200 with %s", resp.StatusCode, replay.ID, first.ID)
	}

	// Settle two orders: the CANCELLING one still counts, the limit is no longer reached.
	for _, id := range []string{first.ID, second.ID} {
		f.mustDeliver(t, id, "payment.authorized")
		f.mustDeliver(t, id, "stock.reserved")
	}
	waitPending(t, f.svc, func(n int64) bool { return n == 1 })
	var created ordersvc.OrderJSON
	resp = f.do(t, "POST", "/orders", validBody, map[string]string{"Idempotency-Key": "k-new"}, &created)
	if resp.StatusCode != http.StatusCreated || created.State != ordersvc.Pending {
		t.Fatalf("k-new after settling: status %d (a refused key must have left nothing behind)", resp.StatusCode)
	}
	if n := countOrders(); n != limit+1 {
		t.Fatalf("%d orders, want %d", n, limit+1)
	}
	if n := f.svc.Pending(); n != 2 {
		t.Fatalf("pending %d after one more creation, want 2", n)
	}
	if n := f.svc.ShedByPending(); n != 2 {
		t.Fatalf("ShedByPending %d, want still 2", n)
	}
}

// TestPendingFollowsOwnTransitions: between two refreshes (none runs here) the count
// takes off at once each order this instance ends, and counts one it moves out of a
// terminal state again, so a slow refresh does not make admission refuse orders that
// have already settled.
func TestPendingFollowsOwnTransitions(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{}, ordersvc.WithMaxPending(10))
	a, b := f.create(t), f.create(t)
	if n := f.svc.Pending(); n != 2 {
		t.Fatalf("pending %d after two creations, want 2", n)
	}
	f.mustDeliver(t, a.ID, "payment.authorized")
	if n := f.svc.Pending(); n != 2 {
		t.Fatalf("pending %d with both orders still PENDING, want 2", n)
	}
	f.mustDeliver(t, a.ID, "stock.reserved")
	if got := f.get(t, a.ID).State; got != ordersvc.Confirmed {
		t.Fatalf("order a %s, want CONFIRMED", got)
	}
	if n := f.svc.Pending(); n != 1 {
		t.Fatalf("pending %d after one order confirmed, want 1", n)
	}
	if resp := f.do(t, "POST", "/orders/"+b.ID+"/cancel", "", nil, nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: status %d", resp.StatusCode)
	}
	if n := f.svc.Pending(); n != 1 {
		t.Fatalf("pending %d with the other order CANCELLING, want 1", n)
	}
	f.mustDeliver(t, b.ID, "payment.declined")
	if got := f.get(t, b.ID).State; !got.Terminal() {
		t.Fatalf("order b %s after payment.declined while CANCELLING, want a terminal state", got)
	}
	if n := f.svc.Pending(); n != 0 {
		t.Fatalf("pending %d with both orders ended, want 0", n)
	}
	if err := f.svc.RefreshPending(context.Background()); err != nil || f.svc.Pending() != 0 {
		t.Fatalf("refresh: pending %d (%v), want 0", f.svc.Pending(), err)
	}
}

// TestMaxPendingOff: the default of New is no limit, and a negative one is an error.
func TestMaxPendingOff(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	if f.svc.MaxPending() != 0 {
		t.Fatalf("MaxPending %d by default", f.svc.MaxPending())
	}
	if err := f.svc.RunPendingCounter(context.Background()); err != nil {
		t.Fatalf("RunPendingCounter when off: %v", err)
	}
	f.create(t)
	if _, err := ordersvc.New(testenv.Postgres(t), ordersvc.Settings{}, ordersvc.WithMaxPending(-1)); err == nil {
		t.Fatal("negative max pending accepted")
	}
}

// waitPending polls the background count until ok, with a deadline.
func waitPending(t *testing.T, svc *ordersvc.Service, ok func(int64) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok(svc.Pending()) {
		if time.Now().After(deadline) {
			t.Fatalf("pending count stayed at %d", svc.Pending())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
