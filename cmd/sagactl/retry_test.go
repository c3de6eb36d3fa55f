package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

// TestRetryCompensation drives `sagactl order retry-compensation` against the real order
// API (its own database, no payment or inventory: nobody answers the cancellation).
func TestRetryCompensation(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	if err := ordersvc.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	svc, err := ordersvc.New(pool, ordersvc.Settings{CompensationTimeout: time.Hour, CompensationRetries: ordersvc.NoCompensationRetries},
		ordersvc.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	api, err := newOrderAPI(srv.URL, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	o, err := api.Place(ctx, PlaceOrderRequest{CustomerID: "c-1", Items: []Item{{SKU: "sku-1", Qty: 1}}, Amount: 100}, "")
	if err != nil {
		t.Fatal(err)
	}

	// PENDING: nothing to compensate; the API's 409 is a failure (exit 1).
	code, _, errs := sagactlHTTP(t, saga{orderURL: srv.URL}, "order", "retry-compensation", o.ID)
	if code != exitFailure || !strings.Contains(errs, "invalid_transition") || !strings.Contains(errs, "order is PENDING") {
		t.Fatalf("retry of a PENDING order: exit %d: %s", code, errs)
	}

	// CANCELLING: re-sent (JSON).
	if _, err := api.Cancel(ctx, o.ID); err != nil {
		t.Fatal(err)
	}
	code, out, errs := sagactlHTTP(t, saga{orderURL: srv.URL}, "order", "retry-compensation", o.ID, "-json")
	if code != exitOK {
		t.Fatalf("retry while CANCELLING: exit %d: %s", code, errs)
	}
	var got Order
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("-json: %v\n%s", err, out)
	}
	if got.ID != o.ID || got.State != "CANCELLING" || got.CompensationAttempts != 2 || got.DeadlineAt == nil {
		t.Fatalf("retry while CANCELLING: %+v", got)
	}

	// COMPENSATION_FAILED (no re-sends configured, deadline moved into the past): back to
	// CANCELLING by hand (table output).
	if _, err := pool.Exec(ctx, "UPDATE orders SET deadline_at = now() - interval '1 second' WHERE id = $1", o.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := svc.SweepOnce(ctx); err != nil || n != 1 {
		t.Fatalf("SweepOnce = %d, %v", n, err)
	}
	code, out, _ = sagactlHTTP(t, saga{orderURL: srv.URL}, "order", o.ID)
	if code != exitOK || !strings.Contains(out, "state     COMPENSATION_FAILED") ||
		!strings.Contains(out, "sagactl order retry-compensation "+o.ID) || !strings.Contains(out, "attempts  cancellation sent 2 times") {
		t.Fatalf("order view of a failed compensation: exit %d\n%s", code, out)
	}
	code, out, errs = sagactlHTTP(t, saga{orderURL: srv.URL}, "order", "retry-compensation", o.ID)
	if code != exitOK || !strings.Contains(out, "cancellation re-sent for order "+o.ID+": CANCELLING, attempt 3") {
		t.Fatalf("retry of COMPENSATION_FAILED: exit %d\n%s%s", code, out, errs)
	}
	// Connection flags may come before the command, as for every command.
	var out2, errb bytes.Buffer
	code = run(ctx, []string{"-order-url", srv.URL, "-json", "order", "retry-compensation", o.ID},
		stdio{out: &out2, err: &errb, getenv: func(string) string { return "" }})
	if err := json.Unmarshal(out2.Bytes(), &got); code != exitOK || err != nil || got.CompensationAttempts != 4 {
		t.Fatalf("flags first: exit %d %v %+v: %s", code, err, got, errb.String())
	}
	code, out, _ = sagactlHTTP(t, saga{orderURL: srv.URL}, "order", o.ID)
	if code != exitOK || strings.Count(out, "command.retry_compensation") != 3 {
		t.Fatalf("the retries are not in the timeline:\n%s", out)
	}

	// Unknown order, usage errors, unreachable service.
	if code, _, errs := sagactlHTTP(t, saga{orderURL: srv.URL}, "order", "retry-compensation", "01890000-0000-7000-8000-000000000000"); code != exitFailure ||
		!strings.Contains(errs, "not_found") {
		t.Fatalf("unknown order: exit %d: %s", code, errs)
	}
	if code, _, _ := sagactlHTTP(t, saga{orderURL: srv.URL}, "order", "retry-compensation"); code != exitUsage {
		t.Fatalf("no id: exit %d", code)
	}
	if code, _, _ := sagactlHTTP(t, saga{orderURL: srv.URL}, "order", "retry-compensation", o.ID, o.ID); code != exitUsage {
		t.Fatalf("two ids: exit %d", code)
	}
	closed := httptest.NewServer(nil)
	closed.Close()
	if code, _, _ := sagactlHTTP(t, saga{orderURL: closed.URL}, "order", "retry-compensation", o.ID); code != exitUnreachable {
		t.Fatalf("unreachable: exit %d", code)
	}
}
