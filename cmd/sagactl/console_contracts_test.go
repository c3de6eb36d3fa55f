package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/events"
	reference "github.com/choreo-saga/choreo/services/saga"
	"github.com/choreo-saga/choreo/tracker"
)

// TestConsoleContractViolations: a payment.authorized without the amount its consumers
// require, observed by a tracker checking the reference saga's contracts, is listed on
// the Contracts page with its source, type, version and each schema it breaks (order's
// and inventory's as consumers, payment's own as producer), marked on its saga's page and on the flow page's edge into its type;
// a saga whose payloads keep their contracts carries no mark. The page also lists each
// type and version with its producers and readers, and whether it can be retired.
func TestConsoleContractViolations(t *testing.T) {
	ctx := context.Background()
	db := testenv.Postgres(t)
	cfg, err := loadTrackConfigs("../../deploy/tracker/order.json")
	if err != nil {
		t.Fatal(err)
	}
	catalogue, err := reference.Contracts()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracker.New(db, cfg, tracker.WithContracts(catalogue))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close() //nolint:errcheck
	if err := tracker.Migrate(ctx, db, ""); err != nil {
		t.Fatal(err)
	}
	offsets := map[string]int64{}
	record := func(topic, source, typ, corr string, data any) *kgo.Record {
		t.Helper()
		ev, err := event.New(source, typ, corr, data)
		if err != nil {
			t.Fatal(err)
		}
		ev.SchemaVersion = 1
		ev.Time = time.Now().Add(-time.Minute).UTC()
		r, err := event.ToRecord(topic, ev)
		if err != nil {
			t.Fatal(err)
		}
		r.Offset = offsets[topic]
		offsets[topic]++
		return r
	}
	item := []events.Item{{SKU: "sku-1", Qty: 1}}
	if _, err := tr.Ingest(ctx,
		record(events.TopicOrders, events.SourceOrder, events.OrderCreated, "o-bad",
			events.OrderCreatedV1{OrderID: "o-bad", CustomerID: "c-1", Amount: 500, Items: item}),
		record(events.TopicPayments, events.SourcePayment, events.PaymentAuthorized, "o-bad",
			map[string]any{"order_id": "o-bad", "customer_id": "c-1", "items": item}), // no amount
		record(events.TopicOrders, events.SourceOrder, events.OrderCreated, "o-good",
			events.OrderCreatedV1{OrderID: "o-good", CustomerID: "c-1", Amount: 500, Items: item}),
		record(events.TopicPayments, events.SourcePayment, events.PaymentAuthorized, "o-good",
			events.PaymentV1{OrderID: "o-good", CustomerID: "c-1", Amount: 500, Items: item}),
	); err != nil {
		t.Fatal(err)
	}

	srv, err := newConsole(conn{orderURL: "http://127.0.0.1:1", brokers: "127.0.0.1:1", timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.close)
	srv.tr = tr
	h := srv.handler()

	cp := consoleGet(t, h, "/contracts/")
	body := cp.Body.String()
	if cp.Code != http.StatusOK || !strings.Contains(body, `id="nav-contracts"`) {
		t.Fatalf("contracts page: %d\n%s", cp.Code, body)
	}
	for _, breaks := range []string{"order</td><td>accepts", "inventory</td><td>accepts", "payment</td><td>produces"} {
		row := `<td>payment</td><td>payment.authorized</td><td>v1</td><td>` + breaks + `</td>`
		if !strings.Contains(body, row) {
			t.Errorf("contracts page lacks the violation %s", row)
		}
	}
	if !strings.Contains(body, `href="/sagas/o-bad"`) || !strings.Contains(body, "amount") || strings.Contains(body, "o-good") {
		t.Errorf("contracts page: want o-bad's violation naming amount, nothing of o-good:\n%s", body)
	}

	// The versions table: the retirement report of sagactl contracts usage.
	if !strings.Contains(body, `id="contract-versions"`) ||
		!strings.Contains(body, "<td>payment.authorized</td><td>v1</td><td>payment (") ||
		!strings.Contains(body, "<td>inventory (accepts, upcast), order (accepts, upcast)</td>") ||
		!strings.Contains(body, "no: payment still declares producing it") ||
		!strings.Contains(body, "<td>payment.authorized</td><td>v2</td><td>none seen</td>") {
		t.Errorf("contracts page lacks the versions of payment.authorized:\n%s", body)
	}
	if c := consoleGet(t, h, "/contracts/?window=soon").Code; c != http.StatusBadRequest {
		t.Errorf("contracts page with a bad window: %d, want 400", c)
	}

	bad := consoleGet(t, h, "/sagas/o-bad").Body.String()
	if !strings.Contains(bad, `id="saga-violations"`) || !strings.Contains(bad, "<td>inventory</td><td>accepts</td>") {
		t.Errorf("saga page o-bad lacks its contract violations:\n%s", bad)
	}
	if good := consoleGet(t, h, "/sagas/o-good").Body.String(); strings.Contains(good, `id="saga-violations"`) {
		t.Error("saga page o-good marks a violation it does not have")
	}

	flow := consoleGet(t, h, "/flow/").Body.String()
	if !strings.Contains(flow, `<td>payment.authorized <a class="violation hot" href="/contracts/"`) ||
		!strings.Contains(flow, "3 contract violation(s)") {
		t.Errorf("flow page lacks the mark on the edge into payment.authorized:\n%s", flow)
	}
}
