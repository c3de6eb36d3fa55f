package paymentsvc

import (
	"context"
	"errors"
	"fmt"
	"github.com/choreo-saga/choreo/app"
	"sync"
	"testing"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
)

type emitted struct{ typ, reason string }

func TestHandlerScenarios(t *testing.T) {
	type step struct {
		kind     string // created, unavailable, cancel
		customer string
		amount   int64
	}
	tests := []struct {
		name        string
		steps       []step
		want        []emitted
		wantStatus  string
		wantBalance int64 // change of the customer's balance
	}{
		{
			name:        "charge",
			steps:       []step{{kind: "created", customer: "c-1", amount: 4_200}},
			want:        []emitted{{events.PaymentAuthorized, ""}},
			wantStatus:  StatusAuthorized,
			wantBalance: -4_200,
		},
		{
			name:       "decline over limit",
			steps:      []step{{kind: "created", customer: "c-poor", amount: 500}},
			want:       []emitted{{events.PaymentDeclined, ReasonOverLimit}},
			wantStatus: StatusDeclined,
		},
		{
			name:       "decline insufficient funds",
			steps:      []step{{kind: "created", customer: "c-1", amount: 40_000}, {kind: "created", customer: "c-1", amount: 40_000}, {kind: "created", customer: "c-1", amount: 40_000}},
			want:       []emitted{{events.PaymentAuthorized, ""}, {events.PaymentAuthorized, ""}, {events.PaymentDeclined, ReasonInsufficientFunds}},
			wantStatus: StatusDeclined, // of the last order
			// two charged orders; checked through the audit below
			wantBalance: -80_000,
		},
		{
			name:       "decline unknown customer",
			steps:      []step{{kind: "created", customer: "nobody", amount: 100}},
			want:       []emitted{{events.PaymentDeclined, ReasonUnknownCustomer}},
			wantStatus: StatusDeclined,
		},
		{
			name:       "decline invalid amount",
			steps:      []step{{kind: "created", customer: "c-1", amount: 0}},
			want:       []emitted{{events.PaymentDeclined, ReasonInvalidAmount}},
			wantStatus: StatusDeclined,
		},
		{
			name:       "refund on stock unavailable, once",
			steps:      []step{{kind: "created", customer: "c-1", amount: 1_000}, {kind: "unavailable"}, {kind: "unavailable"}, {kind: "cancel"}},
			want:       []emitted{{events.PaymentAuthorized, ""}, {events.PaymentRefunded, ReasonStockUnavailable + ": insufficient stock"}},
			wantStatus: StatusRefunded,
		},
		{
			name:       "refund on cancel, then stock unavailable refunds nothing",
			steps:      []step{{kind: "created", customer: "c-1", amount: 1_000}, {kind: "cancel"}, {kind: "unavailable"}, {kind: "cancel"}},
			want:       []emitted{{events.PaymentAuthorized, ""}, {events.PaymentRefunded, ReasonCancelled}},
			wantStatus: StatusRefunded,
		},
		{
			name:       "cancel after decline sends nothing",
			steps:      []step{{kind: "created", customer: "c-poor", amount: 500}, {kind: "cancel"}},
			want:       []emitted{{events.PaymentDeclined, ReasonOverLimit}},
			wantStatus: StatusDeclined,
		},
		{
			name:       "cancel before created leaves a tombstone",
			steps:      []step{{kind: "cancel"}, {kind: "created", customer: "c-1", amount: 1_000}, {kind: "unavailable"}},
			want:       []emitted{{events.PaymentDeclined, ReasonCancelled}},
			wantStatus: StatusCancelled,
		},
		{
			name:       "hang customer is held, cancel answers declined",
			steps:      []step{{kind: "created", customer: "c-hang", amount: 1_000}, {kind: "cancel"}, {kind: "cancel"}},
			want:       []emitted{{events.PaymentDeclined, ReasonCancelled}},
			wantStatus: StatusCancelled,
		},
		{
			name:       "hang customer without cancel stays silent",
			steps:      []step{{kind: "created", customer: "c-hang", amount: 1_000}},
			wantStatus: StatusHeld,
		},
		{
			name:        "second order.created for the same order charges nothing",
			steps:       []step{{kind: "created", customer: "c-1", amount: 1_000}, {kind: "created", customer: "c-1", amount: 1_000}},
			want:        []emitted{{events.PaymentAuthorized, ""}},
			wantStatus:  StatusAuthorized,
			wantBalance: -1_000,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pool := newDB(t)
			h := newHandlers(t, nil)
			customer := tc.steps[0].customer
			if customer == "" {
				customer = "c-1"
			}
			before := balance(t, pool, "c-1")
			var last string
			for i, s := range tc.steps {
				order := "o-1"
				if tc.name == "decline insufficient funds" {
					order = fmt.Sprintf("o-%d", i)
				}
				last = order
				var ev event.Event
				var fn consumer.TxHandler
				switch s.kind {
				case "created":
					ev, fn = orderCreated(t, order, s.customer, s.amount), app.Decoded(h.OrderCreated)
				case "unavailable":
					ev, fn = stockUnavailable(t, order), app.Decoded(h.StockUnavailable)
				case "cancel":
					ev, fn = cancelRequested(t, order), app.Decoded(h.CancelRequested)
				}
				apptest.MustHandle(t, pool, fn, ev)
			}
			got := outboxEvents(t, pool)
			if len(got) != len(tc.want) {
				t.Fatalf("emitted %d events %v, want %v", len(got), types(got), tc.want)
			}
			for i, ev := range got {
				p := apptest.DecodeData[events.PaymentV1](t, ev)
				if ev.Type != tc.want[i].typ || p.Reason != tc.want[i].reason {
					t.Errorf("event %d = %s %q, want %s %q", i, ev.Type, p.Reason, tc.want[i].typ, tc.want[i].reason)
				}
				if ev.Subject != p.OrderID || ev.CorrelationID != p.OrderID || ev.CausationID == "" || ev.Source != events.SourcePayment {
					t.Errorf("event %d envelope: %+v", i, ev)
				}
			}
			a := audit(t, pool)
			if st := a.Orders[last].Status; st != tc.wantStatus {
				t.Errorf("status of %s = %q, want %q", last, st, tc.wantStatus)
			}
			if customer == "c-1" {
				if d := balance(t, pool, "c-1") - before; d != tc.wantBalance {
					t.Errorf("balance change = %d, want %d", d, tc.wantBalance)
				}
			}
		})
	}
}

func types(evs []event.Event) []string {
	var s []string
	for _, ev := range evs {
		s = append(s, ev.Type)
	}
	return s
}

func TestAuthorizedCarriesItemsAndCausation(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t, nil)
	in := orderCreated(t, "o-9", "c-2", 2_500)
	apptest.MustHandle(t, pool, app.Decoded(h.OrderCreated), in)
	got := outboxEvents(t, pool)
	if len(got) != 1 {
		t.Fatalf("got %d events", len(got))
	}
	p := apptest.DecodeData[events.PaymentV1](t, got[0])
	if got[0].CausationID != in.ID || got[0].CorrelationID != in.CorrelationID {
		t.Errorf("causation %q correlation %q, want %q %q", got[0].CausationID, got[0].CorrelationID, in.ID, in.CorrelationID)
	}
	if p.CustomerID != "c-2" || p.Amount != 2_500 || len(p.Items) != 1 || p.Items[0] != (events.Item{SKU: "sku-1", Qty: 2}) {
		t.Errorf("payload %+v", p)
	}
}

// With AuthorizedVersion 2, payment.authorized is written at schema version 2
// (amount_cents, currency) and validates against v2's schema; a decline stays v1.
func TestAuthorizedVersion2(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t, func(c *Config) { c.AuthorizedVersion = 2 })
	apptest.MustHandle(t, pool, app.Decoded(h.OrderCreated), orderCreated(t, "o-1", "c-1", 2_500))
	apptest.MustHandle(t, pool, app.Decoded(h.OrderCreated), orderCreated(t, "o-2", "c-poor", 2_500))
	got := outboxEvents(t, pool)
	if len(got) != 2 || got[0].Type != events.PaymentAuthorized || got[0].SchemaVersion != 2 ||
		got[1].Type != events.PaymentDeclined || got[1].SchemaVersion > 1 {
		t.Fatalf("events %+v, want payment.authorized v2 then payment.declined v1", got)
	}
	p, err := contract.Decode[events.PaymentAuthorizedV2](got[0])
	if err != nil || p.AmountCents != 2_500 || p.Currency != events.Currency || p.CustomerID != "c-1" || len(p.Items) != 1 {
		t.Errorf("v2 payload %+v, %v", p, err)
	}
	env := app.MapEnv(map[string]string{EnvAuthorizedVersion: "3"})
	if c := LoadConfig(env); env.Err() == nil || c.Validate() == nil {
		t.Errorf("PAYMENT_AUTHORIZED_VERSION=3 accepted")
	}
}

func TestGatewayFaults(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t, func(c *Config) { c.FailureRate = 1 })
	err := apptest.Handle(pool, app.Decoded(h.OrderCreated), orderCreated(t, "o-1", "c-1", 1_000))
	if !errors.Is(err, ErrGatewayUnavailable) || !consumer.Retryable(err) {
		t.Fatalf("err = %v, want retryable ErrGatewayUnavailable", err)
	}
	if a := audit(t, pool); len(a.Orders) != 0 || len(outboxEvents(t, pool)) != 0 {
		t.Fatalf("a failed charge wrote something: %+v", a.Orders)
	}

	// Half the attempts fail (deterministically alternating); retrying succeeds once.
	var mu sync.Mutex
	n := 0
	h = newHandlers(t, func(c *Config) {
		c.FailureRate = 0.5
		c.Random = func() float64 { mu.Lock(); defer mu.Unlock(); n++; return float64((n+1)%2) * 0.9 }
	})
	ev := orderCreated(t, "o-2", "c-1", 1_000)
	if err := apptest.Handle(pool, app.Decoded(h.OrderCreated), ev); !errors.Is(err, ErrGatewayUnavailable) {
		t.Fatalf("first attempt: %v", err)
	}
	apptest.MustHandle(t, pool, app.Decoded(h.OrderCreated), ev)
	if a := audit(t, pool); a.Orders["o-2"].Status != StatusAuthorized {
		t.Fatalf("o-2 = %+v", a.Orders["o-2"])
	}
}

func TestInvalidEventsArePermanent(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t, nil)
	bad := orderCreated(t, "o-1", "c-1", 100)
	bad.Subject = "o-other"
	err := apptest.Handle(pool, app.Decoded(h.OrderCreated), bad)
	if !errors.Is(err, event.ErrMalformed) || consumer.Retryable(err) {
		t.Errorf("subject mismatch: err = %v, want permanent event.ErrMalformed", err)
	}
	garbled := orderCreated(t, "o-1", "c-1", 100)
	garbled.Data = []byte(`{"order_id": 7}`)
	err = apptest.Handle(pool, app.Decoded(h.OrderCreated), garbled)
	if !errors.Is(err, event.ErrMalformed) || consumer.Retryable(err) {
		t.Errorf("bad payload: err = %v, want permanent event.ErrMalformed", err)
	}
}

// Concurrent charges of one customer never lose an update, and concurrent handlings of
// one order (under different event ids) charge it once.
func TestConcurrentCharges(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t, nil)
	const orders = 20
	var evs []event.Event
	for i := range orders {
		for range 2 { // every order twice, concurrently, with distinct event ids
			evs = append(evs, orderCreated(t, fmt.Sprintf("o-%d", i), "c-2", 1_000))
		}
	}
	apptest.HandleConcurrently(t, pool, app.Decoded(h.OrderCreated), evs...)
	a := audit(t, pool)
	if len(a.Orders) != orders {
		t.Fatalf("%d orders recorded, want %d", len(a.Orders), orders)
	}
	if b := balance(t, pool, "c-2"); b != 100_000-orders*1_000 {
		t.Fatalf("balance %d, want %d", b, 100_000-orders*1_000)
	}
	if n := len(outboxEvents(t, pool)); n != orders {
		t.Fatalf("%d events, want %d", n, orders)
	}
}

func TestSeedKeepsBalances(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t, nil)
	apptest.MustHandle(t, pool, app.Decoded(h.OrderCreated), orderCreated(t, "o-1", "c-1", 1_000))
	if err := Seed(context.Background(), pool, testCustomers); err != nil {
		t.Fatal(err)
	}
	if b := balance(t, pool, "c-1"); b != 99_000 {
		t.Fatalf("reseeding changed the balance to %d", b)
	}
	audit(t, pool)
}
