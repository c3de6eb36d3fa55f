package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/asyncapi"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

// trackerConfig merges the declarations of deploy/tracker: the reference order saga and
// this service's shipping saga.
func trackerConfig(t *testing.T) tracker.Config {
	t.Helper()
	var cfg tracker.Config
	for _, file := range []string{"../../deploy/tracker/order.json", "../../deploy/tracker/shipping.json"} {
		c, err := tracker.LoadConfig(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range c.Topics {
			if !slices.Contains(cfg.Topics, tp) {
				cfg.Topics = append(cfg.Topics, tp)
			}
		}
		cfg.Sagas = append(cfg.Sagas, c.Sagas...)
	}
	return cfg
}

// orderSaga produces the order saga's events for id as the reference services write them
// (order, payment and inventory, each on its own topic, each caused by the one before),
// up to and including the step types given, and returns them.
func orderSaga(t *testing.T, k *apptest.Kit, id string, types ...string) []event.Event {
	t.Helper()
	producers := map[string][2]string{ // type → source, topic
		"order.created":      {"order", "orders.events"},
		"payment.authorized": {"payment", "payments.events"},
		"stock.reserved":     {"inventory", "inventory.events"},
		"order.confirmed":    {"order", ordersTopic},
	}
	var out []event.Event
	for i, typ := range types {
		p := producers[typ]
		ev := apptest.NewEvent(t, p[0], typ, id, orderConfirmed{OrderID: id})
		if i > 0 {
			ev = ev.CausedBy(out[i-1])
		}
		k.Produce(p[1], ev)
		out = append(out, ev)
	}
	return out
}

// The saga tracker follows the reference order saga and this service's shipping saga
// with their declarations in deploy/tracker alone, no code here: it lists both kinds,
// names the stuck order's waiting step and service, and a shipping saga whose
// order.confirmed arrived while the service was stopped (the knob: Kit.Stop) as stuck on
// this service's step. The observed flow and the AsyncAPI document (plus this service's
// registrations) show the choreography across both.
func TestTrackerFollowsOrderAndShippingSagas(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	infra := apptest.NewInfra(t)
	k := apptest.StartKit(t, infra, build)
	// The other services' topics; orders.events and shipping.events are the service's.
	if _, err := kadm.NewClient(k.Client()).CreateTopics(ctx, 3, 1, nil, "payments.events", "inventory.events"); err != nil {
		t.Fatal(err)
	}

	full := []string{"order.created", "payment.authorized", "stock.reserved", "order.confirmed"}
	orderSaga(t, k, "o-shipped", full...)
	orderSaga(t, k, "o-no-stock", "order.created", "payment.authorized")
	k.AwaitEvent(shippingTopic, "o-shipped")
	k.Settled()
	k.Stop()
	orderSaga(t, k, "o-unshipped", full...)

	db := testenv.Postgres(t)
	if err := tracker.Migrate(ctx, db, ""); err != nil {
		t.Fatal(err)
	}
	// The tracker's clock runs a minute ahead: every 30 s window of the events above has passed.
	tr, err := tracker.New(db, trackerConfig(t), tracker.WithGroup(testenv.Name(t, "tracker")),
		tracker.WithNow(func() time.Time { return time.Now().Add(time.Minute) }), tracker.WithRefresh(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close() }()
	runErr := make(chan error, 1)
	go func() { runErr <- tr.Run(ctx, infra.Brokers) }()

	want := map[[2]string]tracker.Status{
		{"order", "o-shipped"}: tracker.StatusCompleted, {"shipping", "o-shipped"}: tracker.StatusCompleted,
		{"order", "o-no-stock"}:  tracker.StatusStuck,
		{"order", "o-unshipped"}: tracker.StatusCompleted, {"shipping", "o-unshipped"}: tracker.StatusStuck,
	}
	var sagas []tracker.Summary
	testenv.Eventually(t, testenv.Timeout, "the tracker to list both kinds of saga", func() bool {
		if sagas, err = tr.List(ctx, ""); err != nil {
			t.Fatal(err)
		}
		got := map[[2]string]tracker.Status{}
		for _, s := range sagas {
			got[[2]string{s.Saga, s.CorrelationID}] = s.Status
		}
		for k, st := range want {
			if got[k] != st {
				return false
			}
		}
		return len(got) == len(want)
	})

	stuck, err := tr.Stuck(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := map[string]*tracker.Waiting{}
	for _, s := range stuck {
		waiting[s.Saga+" "+s.CorrelationID] = s.Waiting
	}
	if w := waiting["order o-no-stock"]; w == nil || w.Step != "reserve stock" || w.Service != "inventory" ||
		w.After.Type != "payment.authorized" {
		t.Errorf("stuck order: waiting %+v; want step \"reserve stock\", inventory to answer payment.authorized", w)
	}
	if w := waiting["shipping o-unshipped"]; w == nil || w.Step != "schedule shipment" || w.Service != "shipping" ||
		w.After.Type != typeOrderConfirmed {
		t.Errorf("stuck shipping saga: waiting %+v; want step \"schedule shipment\", shipping to answer order.confirmed", w)
	}
	if len(stuck) != 2 {
		t.Errorf("%d stuck sagas, want 2: %+v", len(stuck), stuck)
	}

	flow, err := tr.Flow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var edges []string
	for _, e := range flow.Edges {
		edges = append(edges, e.From+" → "+e.To+" by "+e.Source)
		if e.From == typeOrderConfirmed && e.To == typeShipmentScheduled && (e.Source != source || e.ByCausation != 1) {
			t.Errorf("edge %+v: want shipping's one answer, by causation", e)
		}
	}
	wantEdges := []string{
		"order.confirmed → shipment.scheduled by shipping",
		"order.created → payment.authorized by payment",
		"payment.authorized → stock.reserved by inventory",
		"stock.reserved → order.confirmed by order",
	}
	if !slices.Equal(edges, wantEdges) {
		t.Errorf("flow edges:\n%s\nwant:\n%s", strings.Join(edges, "\n"), strings.Join(wantEdges, "\n"))
	}
	doc, err := flow.AsyncAPI("sagas", "1", tracker.Registrations(source, k.App.Router)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := asyncapi.Validate(doc); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	for _, s := range []string{
		`"shipping receives order.confirmed on orders.events"`, `"shipping sends shipment.scheduled on shipping.events"`,
		`"inventory receives payment.authorized on payments.events"`, `"address": "inventory.events"`,
	} {
		if !strings.Contains(string(doc), s) {
			t.Errorf("the AsyncAPI document lacks %s", s)
		}
	}
	if !strings.Contains(string(doc), `"observed answering order.confirmed with shipment.scheduled 1 times (by causation id); registered handler"`) {
		t.Errorf("shipping's receive operation is not both observed and registered:\n%s", doc)
	}

	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
}
