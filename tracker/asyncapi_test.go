package tracker_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/asyncapi"
	"github.com/choreo-saga/choreo/tracker"
)

// The document of an observed flow plus a router's registrations is valid AsyncAPI 3.0.0
// and names the topics, types, producers and consumers.
func TestAsyncAPI(t *testing.T) {
	f := tracker.Flow{
		Nodes: []tracker.FlowNode{
			{Type: "order.confirmed", Sources: []string{"order"}, Topics: []string{"orders.events"}, Count: 3,
				Producers: []tracker.Producer{{Source: "order", Topic: "orders.events", Count: 3}}},
			{Type: "order.created", Sources: []string{"order"}, Topics: []string{"orders.events"}, Count: 3, Starts: 3,
				Producers: []tracker.Producer{{Source: "order", Topic: "orders.events", Count: 3}}},
			{Type: "payment.authorized", Sources: []string{"payment"}, Topics: []string{"payments.events"}, Count: 3,
				Producers: []tracker.Producer{{Source: "payment", Topic: "payments.events", Count: 3}}},
		},
		Edges: []tracker.FlowEdge{
			{From: "order.created", To: "payment.authorized", Source: "payment", Count: 3, ByCausation: 3, P50: time.Second},
			{From: "payment.authorized", To: "order.confirmed", Source: "order", Count: 3, P50: time.Second}, // time order only
		},
	}
	h := func(context.Context, pgx.Tx, event.Event) error { return nil }
	regs := tracker.Registrations("shipping", consumer.NewRouter().HandleOn("orders.events", "order.confirmed", h))
	doc, err := f.AsyncAPI("observed sagas", "1", regs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := asyncapi.Validate(doc); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}

	chans := m["channels"].(map[string]any)
	var addrs []string
	for _, c := range chans {
		addrs = append(addrs, c.(map[string]any)["address"].(string))
	}
	slices.Sort(addrs)
	if !slices.Equal(addrs, []string{"orders.events", "payments.events"}) {
		t.Errorf("channel addresses %v, want orders.events and payments.events", addrs)
	}
	var ops []string
	for _, o := range m["operations"].(map[string]any) {
		ops = append(ops, o.(map[string]any)["summary"].(string))
	}
	slices.Sort(ops)
	want := []string{
		"order sends order.confirmed on orders.events",
		"order sends order.created on orders.events",
		"payment receives order.created on orders.events", // observed by causation
		"payment sends payment.authorized on payments.events",
		"shipping receives order.confirmed on orders.events", // registered
	}
	if !slices.Equal(ops, want) {
		t.Errorf("operations:\n%s\nwant:\n%s", strings.Join(ops, "\n"), strings.Join(want, "\n"))
	}
	msg := m["components"].(map[string]any)["messages"].(map[string]any)["order.created"].(map[string]any)
	hdr := msg["headers"].(map[string]any)["properties"].(map[string]any)
	if ct := hdr[event.HeaderType].(map[string]any)["const"]; ct != "order.created" || msg["name"] != "order.created" {
		t.Errorf("message order.created: name %v, ce_type const %v", msg["name"], ct)
	}

	if _, err := f.AsyncAPI("t", "1", tracker.Registration{Topic: "x"}); err == nil {
		t.Error("a registration without service and type was accepted")
	}
}
