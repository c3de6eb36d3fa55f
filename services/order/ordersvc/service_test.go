package ordersvc_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/internal/svctest"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

// TestEventFlows drives orders through the saga's event sequences, including the races
// between a cancel and in-flight events, and checks the end state, the events the
// order published and its history.
func TestEventFlows(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	tests := []struct {
		name   string
		steps  []string // event types, or "cancel"
		state  ordersvc.State
		emits  []string // after order.created
		reason string
	}{
		{"confirmed", []string{"payment.authorized", "stock.reserved"}, ordersvc.Confirmed,
			[]string{"order.confirmed"}, ""},
		{"declined", []string{"payment.declined"}, ordersvc.Rejected,
			[]string{"order.rejected"}, "payment declined: test"},
		{"out of stock", []string{"payment.authorized", "stock.unavailable", "payment.refunded"}, ordersvc.Rejected,
			[]string{"order.rejected"}, "payment refunded: test"},
		{"cancel before anything", []string{"cancel", "payment.authorized", "payment.refunded", "stock.released"}, ordersvc.Cancelled,
			[]string{"order.cancel_requested", "order.cancelled"}, "cancelled by customer"},
		{"cancel races a reservation: stay until released", []string{"payment.authorized", "cancel", "stock.reserved", "payment.refunded", "stock.released"}, ordersvc.Cancelled,
			[]string{"order.cancel_requested", "order.cancelled"}, "cancelled by customer"},
		{"release before refund", []string{"payment.authorized", "cancel", "stock.reserved", "stock.released", "payment.refunded"}, ordersvc.Cancelled,
			[]string{"order.cancel_requested", "order.cancelled"}, "cancelled by customer"},
		{"cancel races a decline", []string{"cancel", "payment.declined"}, ordersvc.Cancelled,
			[]string{"order.cancel_requested", "order.cancelled"}, "cancelled by customer"},
		{"cancel after stock failure", []string{"payment.authorized", "stock.unavailable", "cancel", "payment.refunded"}, ordersvc.Cancelled,
			[]string{"order.cancel_requested", "order.cancelled"}, "cancelled by customer"},
		{"inventory answers the cancel before the late authorization", []string{"cancel", "stock.released", "payment.authorized", "stock.unavailable", "payment.refunded"}, ordersvc.Cancelled,
			[]string{"order.cancel_requested", "order.cancelled"}, "cancelled by customer"},
		{"still waiting for the refund", []string{"payment.authorized", "cancel", "stock.reserved", "stock.released"}, ordersvc.Cancelling,
			[]string{"order.cancel_requested"}, "cancelled by customer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := f.create(t)
			for _, step := range tt.steps {
				if step == "cancel" {
					if _, err := f.svc.Cancel(context.Background(), o.ID); err != nil {
						t.Fatalf("cancel: %v", err)
					}
					continue
				}
				f.mustDeliver(t, o.ID, step)
			}
			g := f.get(t, o.ID)
			if g.State != tt.state || g.Reason != tt.reason {
				t.Fatalf("state %s reason %q; want %s %q (history %+v)", g.State, g.Reason, tt.state, tt.reason, g.History)
			}
			if got, want := f.typesFor(t, o.ID), append([]string{"order.created"}, tt.emits...); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("events %v; want %v", got, want)
			}
			// One history entry per trigger, none ignored, ending in the final state.
			if len(g.History) != 1+len(tt.steps) {
				t.Fatalf("history %+v", g.History)
			}
			for i, h := range g.History[1:] {
				if h.Ignored || h.CauseEventType != strings.Replace(tt.steps[i], "cancel", "command.cancel", 1) {
					t.Fatalf("history[%d] = %+v; want %s", i+1, h, tt.steps[i])
				}
				if tt.steps[i] != "cancel" && h.CauseEventID == "" {
					t.Fatalf("history[%d] has no cause event id", i+1)
				}
			}
			if last := g.History[len(g.History)-1]; last.To != tt.state {
				t.Fatalf("last history entry %+v", last)
			}
			if tt.state.Terminal() && g.DeadlineAt != nil {
				t.Fatalf("terminal order keeps a deadline %v", g.DeadlineAt)
			}
		})
	}
}

func TestOutcomeEventsAreCausedByTheirTrigger(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	o := f.create(t)
	f.mustDeliver(t, o.ID, "payment.authorized")
	reserved := f.mustDeliver(t, o.ID, "stock.reserved")
	rows := f.outbox(t)
	last := rows[len(rows)-1]
	if last.Type != "order.confirmed" || last.CausationID != reserved.ID || last.CorrelationID != o.ID {
		t.Fatalf("order.confirmed %+v; want caused by %s", last, reserved.ID)
	}
}

// TestInvalidEventsAreRecordedAndIgnored: an event that is invalid in the order's state
// changes no state and emits nothing, but is settled (nil error: not retried, not
// dead-lettered), recorded as ignored in the history and counted.
func TestInvalidEventsAreRecordedAndIgnored(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	o := f.create(t)
	f.mustDeliver(t, o.ID, "payment.authorized")
	f.mustDeliver(t, o.ID, "stock.reserved")
	late := f.mustDeliver(t, o.ID, "stock.released") // e.g. a reservation TTL release after confirmation
	p := f.create(t)
	f.mustDeliver(t, p.ID, "stock.released") // nothing was cancelled

	g := f.get(t, o.ID)
	if g.State != ordersvc.Confirmed || g.StockStatus != "released" {
		t.Fatalf("confirmed order after a late event: %+v", g)
	}
	h := g.History[len(g.History)-1]
	if !h.Ignored || h.From != ordersvc.Confirmed || h.To != ordersvc.Confirmed || h.CauseEventID != late.ID ||
		!strings.Contains(h.Note, "terminal") {
		t.Fatalf("ignored entry %+v", h)
	}
	if got := f.typesFor(t, o.ID); strings.Join(got, ",") != "order.created,order.confirmed" {
		t.Fatalf("events %v", got)
	}
	if g := f.get(t, p.ID); g.State != ordersvc.Pending || !g.History[1].Ignored {
		t.Fatalf("pending order after stock.released: %+v", g)
	}

	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if n := counterSum(rm, ordersvc.MetricIgnored); n != 2 {
		t.Fatalf("%s = %d; want 2", ordersvc.MetricIgnored, n)
	}
}

func counterSum(rm metricdata.ResourceMetrics, name string) int64 {
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					n += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					n += p.Value
				}
			}
		}
	}
	return n
}

func TestBadEventsFailPermanently(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	// An unknown order: dead-lettered, not retried.
	_, err := f.deliver(t, "0190a3d2-0000-7000-8000-000000000000", "payment.authorized")
	if !errors.Is(err, ordersvc.ErrNotFound) || consumer.Retryable(err) {
		t.Fatalf("unknown order: %v (retryable %v)", err, consumer.Retryable(err))
	}
	// A subject that is not an order id.
	_, err = f.deliver(t, "not-an-id", "payment.authorized")
	if !errors.Is(err, event.ErrMalformed) || consumer.Retryable(err) {
		t.Fatalf("bad subject: %v", err)
	}
	// A payload about another order.
	o, other := f.create(t), f.create(t)
	ev, err := event.New("payment", "payment.declined", o.ID, map[string]any{"order_id": other.ID})
	if err != nil {
		t.Fatal(err)
	}
	err = f.svc.HandleEvent(context.Background(), nil, ev)
	if !errors.Is(err, event.ErrMalformed) {
		t.Fatalf("mismatched payload: %v", err)
	}
}

func TestDeadlineSweep(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{SagaTimeout: time.Hour, CompensationTimeout: time.Hour,
		CompensationRetries: ordersvc.NoCompensationRetries})
	ctx := context.Background()
	expired, fresh, charged := f.create(t), f.create(t), f.create(t)
	f.mustDeliver(t, charged.ID, "payment.authorized")
	f.exec(t, "UPDATE orders SET deadline_at = now() - interval '1 second' WHERE id = ANY($1::uuid[])", []string{expired.ID, charged.ID})
	if n, err := f.svc.SweepOnce(ctx); err != nil || n != 2 {
		t.Fatalf("SweepOnce = %d, %v; want 2", n, err)
	}
	for _, id := range []string{expired.ID, charged.ID} {
		g := f.get(t, id)
		if g.State != ordersvc.Cancelling || !strings.HasPrefix(g.Reason, "saga deadline exceeded") ||
			g.History[len(g.History)-1].CauseEventType != "deadline.saga" {
			t.Fatalf("expired order %+v", g)
		}
		if g.DeadlineAt == nil || !g.DeadlineAt.After(time.Now().Add(30*time.Minute)) {
			t.Fatalf("compensation deadline %v; want about an hour ahead", g.DeadlineAt)
		}
		if got := f.typesFor(t, id); got[len(got)-1] != "order.cancel_requested" {
			t.Fatalf("events %v", got)
		}
	}
	if g := f.get(t, fresh.ID); g.State != ordersvc.Pending {
		t.Fatalf("order before its deadline moved: %+v", g)
	}
	// The cancellation continues the saga's trace.
	rows := f.outbox(t)
	if last := rows[len(rows)-1]; !strings.Contains(last.TraceParent, charged.TraceID) {
		t.Fatalf("cancel_requested traceparent %q; want trace %s", last.TraceParent, charged.TraceID)
	}
	// A second sweep finds nothing.
	if n, err := f.svc.SweepOnce(ctx); err != nil || n != 0 {
		t.Fatalf("second SweepOnce = %d, %v", n, err)
	}

	// Compensation that does not finish in time fails visibly (no re-sends here): the
	// refund came, the stock answer did not.
	f.mustDeliver(t, charged.ID, "payment.refunded")
	f.exec(t, "UPDATE orders SET deadline_at = now() - interval '1 second' WHERE id = $1", charged.ID)
	if n, err := f.svc.SweepOnce(ctx); err != nil || n != 1 {
		t.Fatalf("SweepOnce = %d, %v; want 1", n, err)
	}
	g := f.get(t, charged.ID)
	if g.State != ordersvc.CompensationFailed || g.DeadlineAt != nil ||
		g.Reason != "compensation attempt 1 of 1 not finished within 1h0m0s (payment refunded, stock none)" {
		t.Fatalf("compensation failed order %+v", g)
	}
	// The late answer completes it: everything was undone.
	f.mustDeliver(t, charged.ID, "stock.released")
	if g := f.get(t, charged.ID); g.State != ordersvc.Cancelled || g.History[len(g.History)-1].Ignored ||
		g.History[len(g.History)-1].From != ordersvc.CompensationFailed {
		t.Fatalf("after a late release: %+v", g)
	}
	if got := f.typesFor(t, charged.ID); got[len(got)-1] != "order.cancelled" {
		t.Fatalf("events %v; want order.cancelled last", got)
	}

	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if n := counterSum(rm, ordersvc.MetricDeadlines); n != 3 {
		t.Fatalf("%s = %d; want 3", ordersvc.MetricDeadlines, n)
	}
}

func TestStuckOrders(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{StuckAfter: map[ordersvc.State]time.Duration{
		ordersvc.Pending: time.Minute, ordersvc.Cancelling: time.Hour}})
	ctx := context.Background()
	stuckPending, freshPending, cancelling, slowCancelling, confirmed := f.create(t), f.create(t), f.create(t), f.create(t), f.create(t)
	for _, id := range []string{cancelling.ID, slowCancelling.ID} {
		if _, err := f.svc.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	f.mustDeliver(t, confirmed.ID, "payment.authorized")
	f.mustDeliver(t, confirmed.ID, "stock.reserved")
	// Move clocks instead of sleeping: 2 minutes in PENDING is stuck (> 1m), 2 minutes in
	// CANCELLING is not (< 1h), 2 hours in CANCELLING is, and a terminal order never is.
	f.exec(t, "UPDATE orders SET state_since = now() - interval '2 minutes', created_at = now() - interval '2 minutes' WHERE id = ANY($1::uuid[])",
		[]string{stuckPending.ID, cancelling.ID, confirmed.ID})
	f.exec(t, "UPDATE orders SET state_since = now() - interval '2 hours', created_at = now() - interval '2 hours' WHERE id = ANY($1::uuid[])",
		[]string{slowCancelling.ID, confirmed.ID})

	var list ordersvc.ListJSON
	f.do(t, "GET", "/orders?stuck=true", "", nil, &list)
	if ids := idsOf(list); strings.Join(ids, ",") != slowCancelling.ID+","+stuckPending.ID {
		t.Fatalf("stuck = %v; want [%s %s] (oldest first)", ids, slowCancelling.ID, stuckPending.ID)
	}
	for _, o := range list.Orders {
		if !o.Stuck || o.AgeSeconds == nil || *o.AgeSeconds < 100 || o.JaegerURL == "" {
			t.Fatalf("stuck entry %+v", o)
		}
	}
	f.do(t, "GET", "/orders?stuck=true&state=PENDING", "", nil, &list)
	if ids := idsOf(list); len(ids) != 1 || ids[0] != stuckPending.ID {
		t.Fatalf("stuck pending = %v", ids)
	}
	f.do(t, "GET", "/orders?state=PENDING&older_than=1m", "", nil, &list)
	if ids := idsOf(list); len(ids) != 1 || ids[0] != stuckPending.ID {
		t.Fatalf("pending older than 1m = %v", ids)
	}
	f.do(t, "GET", "/orders?limit=2", "", nil, &list)
	if len(list.Orders) != 2 {
		t.Fatalf("limit 2 gave %d", len(list.Orders))
	}
	if g := f.get(t, freshPending.ID); g.Stuck {
		t.Fatal("fresh order reported stuck")
	}
	if g := f.get(t, stuckPending.ID); !g.Stuck {
		t.Fatal("stuck order not reported stuck")
	}

	// The gauge reports the counts of the last sweep.
	if err := f.svc.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.svc.Stuck(); got[ordersvc.Pending] != 1 || got[ordersvc.Cancelling] != 1 {
		t.Fatalf("Stuck() = %v", got)
	}
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if n := counterSum(rm, ordersvc.MetricStuck); n != 2 {
		t.Fatalf("%s = %d; want 2", ordersvc.MetricStuck, n)
	}
}

func idsOf(l ordersvc.ListJSON) []string {
	ids := make([]string, len(l.Orders))
	for i, o := range l.Orders {
		ids[i] = o.ID
	}
	return ids
}

// TestCompensationResentThenFailed: at each compensation deadline the order re-sends its
// cancellation (same saga, a new event id, a longer deadline, a history entry), N times,
// and only then fails; a late refund then completes it to CANCELLED.
func TestCompensationResentThenFailed(t *testing.T) {
	const retries = 2
	f := newFixture(t, ordersvc.Settings{CompensationTimeout: time.Minute, CompensationRetries: retries})
	ctx := context.Background()
	o := f.create(t)
	f.mustDeliver(t, o.ID, "payment.authorized")
	if _, err := f.svc.Cancel(ctx, o.ID); err != nil {
		t.Fatal(err)
	}
	expire := func() {
		t.Helper()
		f.exec(t, "UPDATE orders SET deadline_at = now() - interval '1 second' WHERE id = $1", o.ID)
		if n, err := f.svc.SweepOnce(ctx); err != nil || n != 1 {
			t.Fatalf("SweepOnce = %d, %v; want 1", n, err)
		}
	}
	// Each attempt's deadline doubles: 1m, then 2m, then 4m.
	for attempt := 2; attempt <= retries+1; attempt++ {
		expire()
		g := f.get(t, o.ID)
		last := g.History[len(g.History)-1]
		if g.State != ordersvc.Cancelling || g.CompensationAttempts != attempt ||
			last.CauseEventType != "deadline.compensation" || last.From != ordersvc.Cancelling || last.To != ordersvc.Cancelling ||
			!strings.HasPrefix(last.Note, fmt.Sprintf("compensation attempt %d of %d not finished", attempt-1, retries+1)) {
			t.Fatalf("after re-send %d: %+v", attempt-1, g)
		}
		want := time.Minute << (attempt - 1)
		if left := time.Until(*g.DeadlineAt); left < want-20*time.Second || left > want+20*time.Second {
			t.Fatalf("attempt %d deadline in %s; want about %s", attempt, left, want)
		}
	}
	var sends []outboxRow
	for _, r := range f.outbox(t) {
		if r.Key == o.ID && r.Type == "order.cancel_requested" {
			sends = append(sends, r)
		}
	}
	if len(sends) != retries+1 {
		t.Fatalf("%d cancellations sent; want %d", len(sends), retries+1)
	}
	for i, r := range sends {
		if r.CorrelationID != o.ID || r.Payload["attempt"] != float64(i+1) || r.Payload["reason"] != "cancelled by customer" ||
			!strings.Contains(r.TraceParent, o.TraceID) {
			t.Fatalf("send %d: %+v", i+1, r)
		}
	}

	// The last attempt's deadline fails the compensation.
	expire()
	g := f.get(t, o.ID)
	if g.State != ordersvc.CompensationFailed || g.DeadlineAt != nil || g.CompensationAttempts != retries+1 ||
		!strings.HasPrefix(g.Reason, "compensation attempt 3 of 3 not finished within 4m0s (payment authorized, stock none)") {
		t.Fatalf("after the last attempt: %+v", g)
	}
	if n, err := f.svc.SweepOnce(ctx); err != nil || n != 0 {
		t.Fatalf("a failed compensation was swept again: %d, %v", n, err)
	}

	// The refund and the (empty) release arrive late: CANCELLED.
	f.mustDeliver(t, o.ID, "payment.refunded")
	if g := f.get(t, o.ID); g.State != ordersvc.CompensationFailed {
		t.Fatalf("half compensated: %+v", g)
	}
	f.mustDeliver(t, o.ID, "stock.released")
	g = f.get(t, o.ID)
	if g.State != ordersvc.Cancelled || g.Reason != "compensation completed late, after it had failed" {
		t.Fatalf("after the late answers: %+v", g)
	}
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if n := counterSum(rm, ordersvc.MetricCompensationResends); n != retries {
		t.Fatalf("%s = %d; want %d", ordersvc.MetricCompensationResends, n, retries)
	}
}

// TestRetryCompensationByHand: POST /orders/{id}/retry-compensation re-sends the
// cancellation of a CANCELLING or COMPENSATION_FAILED order (recorded in the history) and
// answers 409 in any other state.
func TestRetryCompensationByHand(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{CompensationTimeout: time.Minute, CompensationRetries: ordersvc.NoCompensationRetries})
	ctx := context.Background()
	o := f.create(t)
	f.mustDeliver(t, o.ID, "payment.authorized")

	var e ordersvc.ErrorJSON
	if resp := f.do(t, "POST", "/orders/"+o.ID+"/retry-compensation", "", nil, &e); resp.StatusCode != http.StatusConflict ||
		e.Error.Code != ordersvc.CodeInvalidTransition || !strings.Contains(e.Error.Message, "order is PENDING") {
		t.Fatalf("retry of a PENDING order: %d %+v", resp.StatusCode, e)
	}
	if resp := f.do(t, "GET", "/orders/"+o.ID+"/retry-compensation", "", nil, nil); resp.StatusCode != http.StatusMethodNotAllowed ||
		resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET: %d allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if resp := f.do(t, "POST", "/orders/01890000-0000-7000-8000-000000000000/retry-compensation", "", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown order: %d", resp.StatusCode)
	}

	if _, err := f.svc.Cancel(ctx, o.ID); err != nil {
		t.Fatal(err)
	}
	var got ordersvc.OrderJSON
	if resp := f.do(t, "POST", "/orders/"+o.ID+"/retry-compensation", "", nil, &got); resp.StatusCode != http.StatusAccepted ||
		got.State != ordersvc.Cancelling || got.CompensationAttempts != 2 {
		t.Fatalf("retry while CANCELLING: %d %+v", resp.StatusCode, got)
	}
	// No re-sends are configured, so the next deadline fails it; by hand it goes back.
	f.exec(t, "UPDATE orders SET deadline_at = now() - interval '1 second' WHERE id = $1", o.ID)
	if _, err := f.svc.SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if g := f.get(t, o.ID); g.State != ordersvc.CompensationFailed {
		t.Fatalf("after the deadline: %+v", g)
	}
	if resp := f.do(t, "POST", "/orders/"+o.ID+"/retry-compensation", "", nil, &got); resp.StatusCode != http.StatusAccepted ||
		got.State != ordersvc.Cancelling || got.DeadlineAt == nil || got.CompensationAttempts != 3 {
		t.Fatalf("retry of COMPENSATION_FAILED: %d %+v", resp.StatusCode, got)
	}
	g := f.get(t, o.ID)
	var retries []ordersvc.HistoryJSON
	for _, h := range g.History {
		if h.CauseEventType == "command.retry_compensation" {
			retries = append(retries, h)
		}
	}
	if len(retries) != 2 || retries[0].From != ordersvc.Cancelling || retries[1].From != ordersvc.CompensationFailed ||
		retries[1].To != ordersvc.Cancelling || !strings.HasPrefix(retries[1].Note, "compensation retried by hand (attempt 3") {
		t.Fatalf("history %+v", g.History)
	}
	if types := f.typesFor(t, o.ID); strings.Count(strings.Join(types, ","), "order.cancel_requested") != 3 {
		t.Fatalf("events %v; want three cancellations", types)
	}
	// Completed, it is CANCELLED and a retry is refused.
	f.mustDeliver(t, o.ID, "payment.refunded")
	f.mustDeliver(t, o.ID, "stock.released")
	if resp := f.do(t, "POST", "/orders/"+o.ID+"/retry-compensation", "", nil, &e); resp.StatusCode != http.StatusConflict ||
		!strings.Contains(e.Error.Message, "order is CANCELLED") {
		t.Fatalf("retry of a CANCELLED order: %d %+v", resp.StatusCode, e)
	}
}

// The forward path's events, arriving as usual, take one round trip each in a consumer
// transaction (the order's update with its history entry; order.confirmed's outbox row
// is written at commit). Arriving otherwise (stock.reserved overtaking the
// payment.authorized that caused it, a late event after the outcome), the conditional
// update writes nothing and the event is decided on the locked row, with the same result:
// one history entry per event, the facts of both.
func TestHandleEventRoundTrips(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	handle := func(t *testing.T, order, typ string) int {
		t.Helper()
		var data any = events.PaymentV1{OrderID: order, CustomerID: "c-1", Amount: 4200, Items: []events.Item{{SKU: "sku-1", Qty: 2}}}
		source := events.SourcePayment
		if typ == events.StockReserved {
			data, source = events.StockV1{OrderID: order, Items: []events.Item{{SKU: "sku-1", Qty: 2}}}, events.SourceInventory
		}
		n, err := svctest.InCountedBatch(f.pool, f.svc.HandleEvent, apptest.NewEvent(t, source, typ, order, data))
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		return n
	}
	check := func(t *testing.T, id string, want []string) {
		t.Helper()
		o, hist, err := f.svc.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if o.State != ordersvc.Confirmed || !o.Facts.PaymentAuthorized || !o.Facts.StockReserved || o.DeadlineAt != (time.Time{}) {
			t.Fatalf("order %+v", o)
		}
		var got []string
		for _, h := range hist {
			got = append(got, fmt.Sprintf("%s>%s %s ignored=%v", h.From, h.To, h.CauseEventType, h.Ignored))
		}
		if strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Fatalf("history\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if got := f.typesFor(t, id); strings.Join(got, ",") != "order.created,order.confirmed" {
			t.Fatalf("events %v", got)
		}
	}

	usual := f.create(t)
	if n := handle(t, usual.ID, events.PaymentAuthorized); n != 1 {
		t.Fatalf("payment.authorized: %d round trips, want 1", n)
	}
	if n := handle(t, usual.ID, events.StockReserved); n != 1 {
		t.Fatalf("stock.reserved: %d round trips, want 1", n)
	}
	check(t, usual.ID, []string{">PENDING command.create ignored=false",
		"PENDING>PENDING payment.authorized ignored=false", "PENDING>CONFIRMED stock.reserved ignored=false"})

	overtaken := f.create(t)
	if n := handle(t, overtaken.ID, events.StockReserved); n != 3 {
		t.Fatalf("stock.reserved first: %d round trips, want 3 (no match, lock, apply)", n)
	}
	handle(t, overtaken.ID, events.PaymentAuthorized)
	check(t, overtaken.ID, []string{">PENDING command.create ignored=false",
		"PENDING>CONFIRMED stock.reserved ignored=false", "CONFIRMED>CONFIRMED payment.authorized ignored=false"})
}
