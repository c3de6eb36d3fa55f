package inventorysvc

import (
	"context"
	"errors"
	"fmt"
	"github.com/choreo-saga/choreo/app"
	"slices"
	"testing"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
)

type emitted struct {
	typ    string
	reason string
	items  []events.Item
}

func TestHandlerScenarios(t *testing.T) {
	type step struct {
		kind  string // authorized, confirmed, cancel
		items []events.Item
	}
	none := []events.Item{}
	tests := []struct {
		name       string
		steps      []step
		want       []emitted
		wantStatus string
		wantAvail  map[string]int64
	}{
		{
			name:       "reserve all items",
			steps:      []step{{kind: "authorized", items: []events.Item{item("sku-2", 2), item("sku-1", 3)}}},
			want:       []emitted{{events.StockReserved, "", []events.Item{item("sku-1", 3), item("sku-2", 2)}}},
			wantStatus: StatusReserved,
			wantAvail:  map[string]int64{"sku-1": 7, "sku-2": 3},
		},
		{
			name:       "lines of one sku are merged",
			steps:      []step{{kind: "authorized", items: []events.Item{item("sku-1", 2), item("sku-1", 3)}}},
			want:       []emitted{{events.StockReserved, "", []events.Item{item("sku-1", 5)}}},
			wantStatus: StatusReserved,
			wantAvail:  map[string]int64{"sku-1": 5},
		},
		{
			name:       "all or nothing",
			steps:      []step{{kind: "authorized", items: []events.Item{item("sku-1", 3), item("sku-2", 6)}}},
			want:       []emitted{{events.StockUnavailable, ReasonInsufficient + " for sku-2", []events.Item{item("sku-1", 3), item("sku-2", 6)}}},
			wantStatus: StatusUnavailable,
			wantAvail:  map[string]int64{"sku-1": 10, "sku-2": 5},
		},
		{
			name:       "out of stock",
			steps:      []step{{kind: "authorized", items: []events.Item{item("sku-rare", 1)}}},
			want:       []emitted{{events.StockUnavailable, ReasonInsufficient + " for sku-rare", []events.Item{item("sku-rare", 1)}}},
			wantStatus: StatusUnavailable,
		},
		{
			name:       "unknown sku",
			steps:      []step{{kind: "authorized", items: []events.Item{item("sku-1", 1), item("sku-nope", 1)}}},
			want:       []emitted{{events.StockUnavailable, ReasonUnknownSKU + " sku-nope", []events.Item{item("sku-1", 1), item("sku-nope", 1)}}},
			wantStatus: StatusUnavailable,
			wantAvail:  map[string]int64{"sku-1": 10},
		},
		{
			name:       "invalid quantity",
			steps:      []step{{kind: "authorized", items: []events.Item{item("sku-1", 0)}}},
			want:       []emitted{{events.StockUnavailable, ReasonInvalidItems, []events.Item{item("sku-1", 0)}}},
			wantStatus: StatusUnavailable,
		},
		{
			name:       "confirm commits; a later cancel releases nothing",
			steps:      []step{{kind: "authorized", items: []events.Item{item("sku-1", 4)}}, {kind: "confirmed"}, {kind: "cancel"}},
			want:       []emitted{{events.StockReserved, "", []events.Item{item("sku-1", 4)}}, {events.StockReleased, ReasonAlreadyCommitted, none}},
			wantStatus: StatusCommitted,
			wantAvail:  map[string]int64{"sku-1": 6},
		},
		{
			name: "cancel releases once; a late payment reserves nothing",
			steps: []step{{kind: "authorized", items: []events.Item{item("sku-1", 4)}}, {kind: "cancel"}, {kind: "cancel"},
				{kind: "authorized", items: []events.Item{item("sku-1", 4)}}, {kind: "confirmed"}},
			want:       []emitted{{events.StockReserved, "", []events.Item{item("sku-1", 4)}}, {events.StockReleased, ReasonCancelled, []events.Item{item("sku-1", 4)}}},
			wantStatus: StatusReleased,
			wantAvail:  map[string]int64{"sku-1": 10},
		},
		{
			name:       "cancel before payment leaves a tombstone",
			steps:      []step{{kind: "cancel"}, {kind: "authorized", items: []events.Item{item("sku-1", 4)}}, {kind: "authorized", items: []events.Item{item("sku-1", 4)}}},
			want:       []emitted{{events.StockReleased, ReasonNothingReserved, none}, {events.StockUnavailable, ReasonOrderCancelled, []events.Item{item("sku-1", 4)}}},
			wantStatus: StatusUnavailable,
			wantAvail:  map[string]int64{"sku-1": 10},
		},
		{
			name:       "cancel after unavailable releases nothing",
			steps:      []step{{kind: "authorized", items: []events.Item{item("sku-rare", 1)}}, {kind: "cancel"}},
			want:       []emitted{{events.StockUnavailable, ReasonInsufficient + " for sku-rare", []events.Item{item("sku-rare", 1)}}, {events.StockReleased, ReasonNothingReserved, none}},
			wantStatus: StatusUnavailable,
		},
		{
			name:       "confirm without reservation does nothing",
			steps:      []step{{kind: "confirmed"}},
			wantStatus: "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pool := newDB(t)
			h := newHandlers(t)
			var items []events.Item // the order announced is the one the payment pays
			for _, s := range tc.steps {
				if s.kind == "authorized" && items == nil {
					items = s.items
				}
			}
			announce(t, pool, h, "o-1", items...)
			for _, s := range tc.steps {
				var ev event.Event
				var fn consumer.TxHandler
				switch s.kind {
				case "authorized":
					ev, fn = authorized(t, "o-1", s.items...), app.Decoded(h.PaymentAuthorized)
				case "confirmed":
					ev, fn = confirmed(t, "o-1"), app.Decoded(h.OrderConfirmed)
				case "cancel":
					ev, fn = cancelRequested(t, "o-1"), app.Decoded(h.CancelRequested)
				}
				apptest.MustHandle(t, pool, fn, ev)
			}
			got := outboxEvents(t, pool)
			if len(got) != len(tc.want) {
				t.Fatalf("emitted %d events, want %d: %v", len(got), len(tc.want), got)
			}
			for i, ev := range got {
				p := apptest.DecodeData[events.StockV1](t, ev)
				w := tc.want[i]
				if ev.Type != w.typ || p.Reason != w.reason || !slices.Equal(p.Items, w.items) || p.Items == nil {
					t.Errorf("event %d = %s %q %v, want %s %q %v", i, ev.Type, p.Reason, p.Items, w.typ, w.reason, w.items)
				}
				if ev.Subject != "o-1" || ev.CorrelationID != "o-1" || ev.CausationID == "" || ev.Source != events.SourceInventory {
					t.Errorf("event %d envelope: %+v", i, ev)
				}
			}
			a := audit(t, pool)
			if st := a.Orders["o-1"].Status; st != tc.wantStatus {
				t.Errorf("status = %q, want %q", st, tc.wantStatus)
			}
			for sku, n := range tc.wantAvail {
				if got := a.SKUs[sku].Available; got != n {
					t.Errorf("%s available = %d, want %d", sku, got, n)
				}
			}
		})
	}
}

func TestSweeperReleasesExpired(t *testing.T) {
	ctx := context.Background()
	pool := newDB(t)
	h := newHandlers(t)
	announce(t, pool, h, "o-old", item("sku-1", 4))
	announce(t, pool, h, "o-new", item("sku-1", 1))
	announce(t, pool, h, "o-x", item("sku-2", 5))
	announce(t, pool, h, "o-y", item("sku-2", 5))
	apptest.MustHandle(t, pool, app.Decoded(h.PaymentAuthorized), authorized(t, "o-old", item("sku-1", 4)))
	apptest.MustHandle(t, pool, app.Decoded(h.PaymentAuthorized), authorized(t, "o-new", item("sku-1", 1)))
	if _, err := pool.Exec(ctx, `UPDATE inventory_reservations SET expires_at = now() - interval '1 second' WHERE order_id = 'o-old'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM choreo_outbox`); err != nil {
		t.Fatal(err)
	}
	sw := NewSweeper(pool, h)
	n, err := sw.SweepOnce(ctx)
	if err != nil || n != 1 {
		t.Fatalf("SweepOnce = %d, %v; want 1", n, err)
	}
	if n, _ := sw.SweepOnce(ctx); n != 0 {
		t.Fatalf("second sweep released %d", n)
	}
	got := outboxEvents(t, pool)
	if len(got) != 1 || got[0].Type != events.StockReleased || got[0].Subject != "o-old" || got[0].CorrelationID != "o-old" {
		t.Fatalf("emitted %+v", got)
	}
	if p := apptest.DecodeData[events.StockV1](t, got[0]); p.Reason != ReasonExpired || !slices.Equal(p.Items, []events.Item{item("sku-1", 4)}) {
		t.Fatalf("payload %+v", p)
	}
	a := audit(t, pool)
	if a.Orders["o-old"].Status != StatusExpired || a.Orders["o-new"].Status != StatusReserved || a.SKUs["sku-1"].Available != 9 {
		t.Fatalf("audit %+v", a)
	}

	// A confirmation that arrives after expiry takes the stock again while it is there…
	apptest.MustHandle(t, pool, app.Decoded(h.OrderConfirmed), confirmed(t, "o-old"))
	if a := audit(t, pool); a.Orders["o-old"].Status != StatusCommitted || a.SKUs["sku-1"].Available != 5 {
		t.Fatalf("after late confirm: %+v", a)
	}
	// …and when it is gone the order stays expired: stock is never oversold.
	apptest.MustHandle(t, pool, app.Decoded(h.PaymentAuthorized), authorized(t, "o-x", item("sku-2", 5)))
	if _, err := pool.Exec(ctx, `UPDATE inventory_reservations SET expires_at = now() - interval '1 second' WHERE order_id = 'o-x'`); err != nil {
		t.Fatal(err)
	}
	if _, err := sw.SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	apptest.MustHandle(t, pool, app.Decoded(h.PaymentAuthorized), authorized(t, "o-y", item("sku-2", 5)))
	apptest.MustHandle(t, pool, app.Decoded(h.OrderConfirmed), confirmed(t, "o-x"))
	if a := audit(t, pool); a.Orders["o-x"].Status != StatusExpired || a.SKUs["sku-2"].Available != 0 {
		t.Fatalf("oversold: %+v", a)
	}
}

// Concurrent orders over the same SKUs, listed in different orders, neither deadlock
// nor oversell: exactly the available quantity is reserved.
func TestConcurrentReservations(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t)
	const orders = 30
	var evs []event.Event
	for i := range orders {
		items := []events.Item{item("sku-1", 1), item("sku-2", 1)}
		if i%2 == 1 {
			items = []events.Item{item("sku-2", 1), item("sku-1", 1)}
		}
		announce(t, pool, h, fmt.Sprintf("o-%d", i), items...)
		evs = append(evs, authorized(t, fmt.Sprintf("o-%d", i), items...))
	}
	apptest.HandleConcurrently(t, pool, app.Decoded(h.PaymentAuthorized), evs...)
	a := audit(t, pool)
	reserved := 0
	for _, o := range a.Orders {
		if o.Status == StatusReserved {
			reserved++
		}
	}
	if reserved != 5 || a.SKUs["sku-2"].Available != 0 || a.SKUs["sku-1"].Available != 5 {
		t.Fatalf("reserved %d orders; sku-1 %+v sku-2 %+v", reserved, a.SKUs["sku-1"], a.SKUs["sku-2"])
	}
}

func TestInvalidEventsArePermanent(t *testing.T) {
	pool := newDB(t)
	h := newHandlers(t)
	bad := authorized(t, "o-1", item("sku-1", 1))
	bad.Subject = "o-2"
	if err := apptest.Handle(pool, app.Decoded(h.PaymentAuthorized), bad); !errors.Is(err, event.ErrMalformed) || consumer.Retryable(err) {
		t.Errorf("subject mismatch: %v", err)
	}
	garbled := cancelRequested(t, "o-1")
	garbled.Data = []byte(`[]`)
	if err := apptest.Handle(pool, app.Decoded(h.CancelRequested), garbled); !errors.Is(err, event.ErrMalformed) || consumer.Retryable(err) {
		t.Errorf("bad payload: %v", err)
	}
}
