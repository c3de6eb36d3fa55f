package ordersvc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/choreo-saga/choreo/services/order/ordersvc"
	"github.com/choreo-saga/choreo/tracing"
)

func TestCreateValidation(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	items := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(`{"sku":"sku-%d","qty":1}`, i)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	tests := []struct {
		name    string
		body    string
		header  map[string]string
		status  int
		code    string
		message string // substring of the error message
	}{
		{"empty body", "", map[string]string{"Content-Type": "application/json"}, 400, "invalid_request", "empty"},
		{"not json", "{customer", nil, 400, "invalid_request", "not valid JSON"},
		{"array", `[1]`, nil, 400, "invalid_request", "JSON object"},
		{"two objects", validBody + validBody, nil, 400, "invalid_request", "exactly one"},
		{"unknown field", `{"customer_id":"c-1","items":[{"sku":"a","qty":1}],"amount":1,"coupon":"x"}`, nil, 400, "invalid_request", `unknown field "coupon"`},
		{"missing customer", `{"items":[{"sku":"a","qty":1}],"amount":1}`, nil, 400, "invalid_request", "customer_id is required"},
		{"bad customer", `{"customer_id":"c 1","items":[{"sku":"a","qty":1}],"amount":1}`, nil, 400, "invalid_request", "customer_id must be"},
		{"long customer", `{"customer_id":"` + strings.Repeat("c", 65) + `","items":[{"sku":"a","qty":1}],"amount":1}`, nil, 400, "invalid_request", "customer_id must be"},
		{"no items", `{"customer_id":"c-1","items":[],"amount":1}`, nil, 400, "invalid_request", "at least one item"},
		{"51 items", `{"customer_id":"c-1","items":` + items(51) + `,"amount":1}`, nil, 400, "invalid_request", "at most 50"},
		{"bad sku", `{"customer_id":"c-1","items":[{"sku":"-x","qty":1}],"amount":1}`, nil, 400, "invalid_request", "items[0].sku"},
		{"sku with colon", `{"customer_id":"c-1","items":[{"sku":"a:b","qty":1}],"amount":1}`, nil, 400, "invalid_request", "items[0].sku"},
		{"zero qty", `{"customer_id":"c-1","items":[{"sku":"a","qty":0}],"amount":1}`, nil, 400, "invalid_request", "items[0].qty"},
		{"qty 1001", `{"customer_id":"c-1","items":[{"sku":"a","qty":1},{"sku":"b","qty":1001}],"amount":1}`, nil, 400, "invalid_request", "items[1].qty"},
		{"fractional qty", `{"customer_id":"c-1","items":[{"sku":"a","qty":1.5}],"amount":1}`, nil, 400, "invalid_request", "items.qty must be a JSON integer"},
		{"duplicate sku", `{"customer_id":"c-1","items":[{"sku":"a","qty":1},{"sku":"a","qty":2}],"amount":1}`, nil, 400, "invalid_request", "appears twice"},
		{"zero amount", `{"customer_id":"c-1","items":[{"sku":"a","qty":1}],"amount":0}`, nil, 400, "invalid_request", "amount must be a positive"},
		{"negative amount", `{"customer_id":"c-1","items":[{"sku":"a","qty":1}],"amount":-5}`, nil, 400, "invalid_request", "amount must be a positive"},
		{"string amount", `{"customer_id":"c-1","items":[{"sku":"a","qty":1}],"amount":"5"}`, nil, 400, "invalid_request", "amount must be a JSON integer"},
		{"huge amount", `{"customer_id":"c-1","items":[{"sku":"a","qty":1}],"amount":99999999999999999999}`, nil, 400, "invalid_request", "amount must be a JSON integer"},
		{"too large", `{"customer_id":"` + strings.Repeat("c", ordersvc.MaxBodyBytes) + `"}`, nil, 413, "payload_too_large", "larger than"},
		{"wrong content type", validBody, map[string]string{"Content-Type": "text/plain"}, 415, "invalid_request", "Content-Type"},
		// A cross-site fetch(url, {mode: "no-cors", method: "POST", body: blob}) sends no
		// Content-Type: refused, so another origin's page cannot create an order.
		{"no content type", validBody, map[string]string{"Content-Type": ""}, 415, "invalid_request", "Content-Type"},
		{"form content type", validBody, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "invalid_request", "Content-Type"},
		{"duplicate key", `{"customer_id":"c-1","items":[{"sku":"a","qty":1}],"amount":100,"amount":200}`, nil, 400, "invalid_request", `"amount" appears twice`},
		{"duplicate key in another case", `{"customer_id":"c-1","items":[{"sku":"a","qty":1}],"amount":100,"AMOUNT":200}`, nil, 400, "invalid_request", `"AMOUNT" appears twice`},
		{"duplicate key in an item", `{"customer_id":"c-1","items":[{"sku":"a","qty":1,"Qty":1000}],"amount":100}`, nil, 400, "invalid_request", `"Qty" appears twice`},
		{"blank idempotency key", validBody, map[string]string{"Idempotency-Key": " "}, 400, "invalid_request", "Idempotency-Key"},
		{"long idempotency key", validBody, map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, 400, "invalid_request", "Idempotency-Key"},
		{"valid", validBody, map[string]string{"Content-Type": "application/json; charset=utf-8"}, 201, "", ""},
		{"50 items", `{"customer_id":"c-1","items":` + items(50) + `,"amount":1}`, nil, 201, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e ordersvc.ErrorJSON
			resp := f.do(t, "POST", "/orders", tt.body, tt.header, &e)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d; want %d (error %+v)", resp.StatusCode, tt.status, e.Error)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if e.Error.Code != tt.code || !strings.Contains(e.Error.Message, tt.message) {
				t.Errorf("error %+v; want code %q and message containing %q", e.Error, tt.code, tt.message)
			}
		})
	}
	// Only the two valid requests created orders, and nothing else reached the outbox.
	var n int
	if err := f.pool.QueryRow(context.Background(), "SELECT count(*) FROM orders").Scan(&n); err != nil || n != 2 {
		t.Fatalf("orders = %d (%v); want 2", n, err)
	}
	if got := len(f.outbox(t)); got != 2 {
		t.Fatalf("outbox rows = %d; want 2", got)
	}
}

func TestCreateAndGet(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	var o ordersvc.OrderJSON
	resp := f.do(t, "POST", "/orders", validBody, nil, &o)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") != "/orders/"+o.ID {
		t.Fatalf("status %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if o.State != ordersvc.Pending || o.CustomerID != "c-1" || o.Amount != 4200 || len(o.Items) != 1 ||
		o.Items[0].SKU != "sku-1" || o.Items[0].Qty != 2 || o.PaymentStatus != "none" || o.StockStatus != "none" {
		t.Fatalf("created %+v", o)
	}
	if o.DeadlineAt == nil || !o.DeadlineAt.After(o.CreatedAt) {
		t.Fatalf("deadline %v not after creation %v", o.DeadlineAt, o.CreatedAt)
	}
	if len(o.TraceID) != 32 || o.JaegerURL != "http://jaeger.test:16686/trace/"+o.TraceID {
		t.Fatalf("trace id %q, jaeger url %q", o.TraceID, o.JaegerURL)
	}

	// order.created waits in the outbox, keyed and correlated by the order id, and
	// carries the trace of the HTTP request.
	rows := f.outbox(t)
	if len(rows) != 1 {
		t.Fatalf("outbox %+v", rows)
	}
	r := rows[0]
	if r.Topic != "orders.events" || r.Key != o.ID || r.Type != "order.created" || r.CorrelationID != o.ID ||
		r.Payload["order_id"] != o.ID || r.Payload["customer_id"] != "c-1" || r.Payload["amount"] != 4200.0 {
		t.Fatalf("outbox row %+v", r)
	}
	if !strings.Contains(r.TraceParent, o.TraceID) {
		t.Fatalf("traceparent %q is not in trace %s", r.TraceParent, o.TraceID)
	}
	// The server span is named after the route and carries the saga attributes.
	var found bool
	for _, s := range f.spans.Ended() {
		if s.Name() == "POST /orders" {
			found = true
			a := spanAttrs(s)
			if a[tracing.AttrCorrelationID] != o.ID || a[ordersvc.AttrOrderID] != o.ID || s.SpanContext().TraceID().String() != o.TraceID {
				t.Fatalf("span attributes %v, trace %s", a, s.SpanContext().TraceID())
			}
		}
	}
	if !found {
		t.Fatal("no POST /orders span")
	}

	g := f.get(t, o.ID)
	if g.ID != o.ID || g.State != ordersvc.Pending || g.Stuck || len(g.History) != 1 ||
		g.History[0].To != ordersvc.Pending || g.History[0].CauseEventType != "command.create" {
		t.Fatalf("get %+v", g)
	}
}

func TestIdempotencyKey(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	key := map[string]string{"Idempotency-Key": "checkout-42"}
	var first, again ordersvc.OrderJSON
	if resp := f.do(t, "POST", "/orders", validBody, key, &first); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	// The same request, formatted differently, is a replay: same order, 200.
	reformatted := `{ "amount": 4200, "items": [ {"qty": 2, "sku": "sku-1"} ], "customer_id": "c-1" }`
	resp := f.do(t, "POST", "/orders", reformatted, key, &again)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "true" || again.ID != first.ID {
		t.Fatalf("replay: status %d, replayed %q, id %s vs %s", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), again.ID, first.ID)
	}
	// The same key with another body is refused.
	var e ordersvc.ErrorJSON
	other := strings.Replace(validBody, "4200", "4300", 1)
	if resp := f.do(t, "POST", "/orders", other, key, &e); resp.StatusCode != http.StatusUnprocessableEntity || e.Error.Code != "idempotency_key_reused" {
		t.Fatalf("reuse: status %d, %+v", resp.StatusCode, e)
	}
	// Another key makes another order.
	var third ordersvc.OrderJSON
	if resp := f.do(t, "POST", "/orders", validBody, map[string]string{"Idempotency-Key": "checkout-43"}, &third); resp.StatusCode != http.StatusCreated || third.ID == first.ID {
		t.Fatalf("other key: status %d id %s", resp.StatusCode, third.ID)
	}

	// Concurrent requests with one new key create exactly one order.
	const n = 8
	ids := make([]string, n)
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var o ordersvc.OrderJSON
			resp := f.do(t, "POST", "/orders", validBody, map[string]string{"Idempotency-Key": "race"}, &o)
			ids[i], statuses[i] = o.ID, resp.StatusCode
		})
	}
	wg.Wait()
	created := 0
	for i := range n {
		if ids[i] != ids[0] {
			t.Fatalf("concurrent replays returned different orders: %v", ids)
		}
		if statuses[i] == http.StatusCreated {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d of %d concurrent requests created; want 1 (statuses %v)", created, n, statuses)
	}
	var count int
	if err := f.pool.QueryRow(context.Background(), "SELECT count(*) FROM orders").Scan(&count); err != nil || count != 3 {
		t.Fatalf("orders = %d (%v); want 3", count, err)
	}
	if got := len(f.outbox(t)); got != 3 {
		t.Fatalf("order.created events = %d; want 3", got)
	}
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[string]string {
	a := map[string]string{}
	for _, kv := range s.Attributes() {
		a[string(kv.Key)] = kv.Value.Emit()
	}
	return a
}

func TestRoutesAndErrors(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	tests := []struct {
		method, path string
		status       int
		code         string
		allow        string
	}{
		{"GET", "/nowhere", 404, "not_found", ""},
		{"GET", "/orders/not-a-uuid", 404, "not_found", ""},
		{"GET", "/orders/0190a3d2-0000-7000-8000-000000000000", 404, "not_found", ""},
		{"POST", "/orders/0190a3d2-0000-7000-8000-000000000000/cancel", 404, "not_found", ""},
		{"DELETE", "/orders", 405, "method_not_allowed", "GET, POST"},
		{"PUT", "/orders/0190a3d2-0000-7000-8000-000000000000", 405, "method_not_allowed", "GET"},
		{"GET", "/orders/0190a3d2-0000-7000-8000-000000000000/cancel", 405, "method_not_allowed", "POST"},
		{"GET", "/orders?state=NOPE", 400, "invalid_request", ""},
		{"GET", "/orders?stuck=maybe", 400, "invalid_request", ""},
		{"GET", "/orders?older_than=-5m", 400, "invalid_request", ""},
		{"GET", "/orders?older_than=5", 400, "invalid_request", ""},
		{"GET", "/orders?limit=0", 400, "invalid_request", ""},
		{"GET", "/orders?limit=1001", 400, "invalid_request", ""},
		{"GET", "/orders?limit=1&limit=2", 400, "invalid_request", ""},
		{"GET", "/orders?stuk=true", 400, "invalid_request", ""},
		{"GET", "/orders?state=pending&stuck=true&older_than=1m&limit=5", 200, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			var e ordersvc.ErrorJSON
			resp := f.do(t, tt.method, tt.path, "", nil, &e)
			if resp.StatusCode != tt.status || e.Error.Code != tt.code || resp.Header.Get("Allow") != tt.allow {
				t.Fatalf("status %d, error %+v, Allow %q; want %d %q %q", resp.StatusCode, e.Error, resp.Header.Get("Allow"), tt.status, tt.code, tt.allow)
			}
		})
	}
}

func TestCancelAPI(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	o := f.create(t)
	var c ordersvc.OrderJSON
	if resp := f.do(t, "POST", "/orders/"+o.ID+"/cancel", "", nil, &c); resp.StatusCode != http.StatusAccepted || c.State != ordersvc.Cancelling {
		t.Fatalf("cancel: %d %+v", resp.StatusCode, c)
	}
	// A repeated cancel is accepted and changes nothing.
	if resp := f.do(t, "POST", "/orders/"+o.ID+"/cancel", "", nil, &c); resp.StatusCode != http.StatusAccepted || c.State != ordersvc.Cancelling {
		t.Fatalf("second cancel: %d %+v", resp.StatusCode, c)
	}
	if got := f.typesFor(t, o.ID); strings.Join(got, ",") != "order.created,order.cancel_requested" {
		t.Fatalf("events %v", got)
	}
	rows := f.outbox(t)
	if rows[1].Payload["reason"] != "cancelled by customer" {
		t.Fatalf("cancel_requested payload %v", rows[1].Payload)
	}
	// The cancellation continues the saga's trace.
	if !strings.Contains(rows[1].TraceParent, o.TraceID) {
		t.Fatalf("cancel_requested traceparent %q is not in the saga trace %s", rows[1].TraceParent, o.TraceID)
	}
	// The cancel span is a child of the saga's root span, linked to the request's span,
	// and both carry the saga attributes.
	var cancelSpan, reqSpan sdktrace.ReadOnlySpan
	for _, sp := range f.spans.Ended() {
		switch sp.Name() {
		case "order.cancel":
			if cancelSpan == nil {
				cancelSpan = sp
			}
		case "POST /orders/{id}/cancel":
			if reqSpan == nil {
				reqSpan = sp
			}
		}
	}
	if cancelSpan == nil || reqSpan == nil {
		t.Fatal("missing order.cancel or request span")
	}
	if cancelSpan.SpanContext().TraceID().String() != o.TraceID || cancelSpan.Parent().SpanID().String() == "" ||
		len(cancelSpan.Links()) != 1 || cancelSpan.Links()[0].SpanContext.SpanID() != reqSpan.SpanContext().SpanID() {
		t.Fatalf("order.cancel span: trace %s parent %s links %v", cancelSpan.SpanContext().TraceID(), cancelSpan.Parent().SpanID(), cancelSpan.Links())
	}
	for _, sp := range []sdktrace.ReadOnlySpan{cancelSpan, reqSpan} {
		a := spanAttrs(sp)
		if a[tracing.AttrCorrelationID] != o.ID || a[ordersvc.AttrOrderID] != o.ID {
			t.Fatalf("span %s attributes %v", sp.Name(), a)
		}
	}
	if spanAttrs(reqSpan)["saga.trace_id"] != o.TraceID {
		t.Fatalf("request span does not name the saga trace: %v", spanAttrs(reqSpan))
	}

	g := f.get(t, o.ID)
	if len(g.History) != 2 || g.History[1].From != ordersvc.Pending || g.History[1].To != ordersvc.Cancelling ||
		g.History[1].CauseEventType != "command.cancel" || g.DeadlineAt == nil {
		t.Fatalf("history %+v deadline %v", g.History, g.DeadlineAt)
	}

	// A confirmed order cannot be cancelled.
	o2 := f.create(t)
	f.mustDeliver(t, o2.ID, "payment.authorized")
	f.mustDeliver(t, o2.ID, "stock.reserved")
	var e ordersvc.ErrorJSON
	if resp := f.do(t, "POST", "/orders/"+o2.ID+"/cancel", "", nil, &e); resp.StatusCode != http.StatusConflict ||
		e.Error.Code != "invalid_transition" || !strings.Contains(e.Error.Message, "CONFIRMED") {
		t.Fatalf("cancel confirmed: %d %+v", resp.StatusCode, e)
	}
	if g := f.get(t, o2.ID); g.State != ordersvc.Confirmed || len(g.History) != 3 {
		t.Fatalf("after refused cancel: %+v", g)
	}
}

func TestCounts(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	var c ordersvc.CountsJSON
	if resp := f.do(t, "GET", "/orders/counts", "", nil, &c); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if len(c.ByState) != len(ordersvc.States) || c.ByState[ordersvc.Pending] != 0 || c.Stuck[ordersvc.Pending] != 0 {
		t.Fatalf("empty table: %+v", c)
	}
	a, b := f.create(t), f.create(t)
	f.create(t)
	f.exec(t, "UPDATE orders SET state = 'CONFIRMED' WHERE id = $1", a.ID)
	f.exec(t, "UPDATE orders SET state_since = now() - interval '1 day' WHERE id = $1", b.ID)
	c = ordersvc.CountsJSON{}
	if resp := f.do(t, "GET", "/orders/counts", "", nil, &c); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if c.ByState[ordersvc.Pending] != 2 || c.ByState[ordersvc.Confirmed] != 1 || c.ByState[ordersvc.Cancelled] != 0 ||
		c.Stuck[ordersvc.Pending] != 1 || c.Stuck[ordersvc.Cancelling] != 0 {
		t.Fatalf("counts %+v; want PENDING 2 (1 stuck), CONFIRMED 1", c)
	}
	if resp := f.do(t, "POST", "/orders/counts", "", nil, nil); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /orders/counts: status %d", resp.StatusCode)
	}
}

// A saga whose first span was not sampled stays unsampled: later commands continue its
// trace with the sampling decision taken at its start, not a forced "sampled".
func TestSagaKeepsItsSamplingDecision(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := newFixture(t, ordersvc.Settings{}, ordersvc.WithTracerProvider(tp))
	for _, tt := range []struct {
		name, flags string
	}{{"unsampled", "00"}, {"sampled", "01"}} {
		t.Run(tt.name, func(t *testing.T) {
			const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
			var o ordersvc.OrderJSON
			parent := map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-" + tt.flags}
			if resp := f.do(t, "POST", "/orders", validBody, parent, &o); resp.StatusCode != http.StatusCreated || o.TraceID != traceID {
				t.Fatalf("create: status %d, trace %q", resp.StatusCode, o.TraceID)
			}
			if resp := f.do(t, "POST", "/orders/"+o.ID+"/cancel", "", nil, nil); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("cancel: status %d", resp.StatusCode)
			}
			var got []string
			for _, r := range f.outbox(t) {
				if r.Payload["order_id"] == o.ID {
					got = append(got, r.TraceParent)
				}
			}
			if len(got) != 2 {
				t.Fatalf("%d events of the order, want 2", len(got))
			}
			for _, tp := range got {
				if !strings.Contains(tp, traceID) || !strings.HasSuffix(tp, "-"+tt.flags) {
					t.Errorf("traceparent %q: want trace %s with flags %s", tp, traceID, tt.flags)
				}
			}
		})
	}
}

// TestUnavailable: a request that fails because Postgres refuses the connection (here a
// FATAL from the server, as when it is at max_connections or shutting down) is answered
// 503 unavailable with Retry-After, not 500: the client retries it with the same
// Idempotency-Key.
func TestUnavailable(t *testing.T) {
	srv := httptest.NewServer(unavailableService(t).Handler())
	t.Cleanup(srv.Close)
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/orders", `{"customer_id":"c-1","items":[{"sku":"sku-1","qty":1}],"amount":100}`},
		{"GET", "/orders/0190a3d2-0000-7000-8000-000000000000", ""},
		{"GET", "/orders?state=PENDING", ""},
	} {
		req, err := http.NewRequest(r.method, srv.URL+r.path, strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "k-1")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e ordersvc.ErrorJSON
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || e.Error.Code != ordersvc.CodeUnavailable || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("%s %s: %d %+v Retry-After %q, want 503 %q Retry-After 1", r.method, r.path,
				resp.StatusCode, e.Error, resp.Header.Get("Retry-After"), ordersvc.CodeUnavailable)
		}
	}
}
