package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/inventory/inventorysvc"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
	"github.com/choreo-saga/choreo/services/payment/paymentsvc"
)

// The mix of orders: of every ten, seven succeed, one is declined (c-poor's limit is $1),
// one is out of stock (sku-rare has none; half of them also ask for an available SKU,
// which must not stay reserved), and one is cancelled while in flight. Of the cancelled
// ones, half belong to c-hang, whose payment never answers, so the cancel always lands
// in flight; the other half are ordinary orders that race the saga, cancelled either
// right after placement or as soon as the order has seen the charge (the window in which
// inventory may reserve while the order is already CANCELLING). The cancel usually wins:
// the charge is refunded and the stock released; if the order was confirmed first, the
// cancel is refused with 409 and the order stays CONFIRMED.
type kind int

const (
	success kind = iota
	declined
	outOfStock
	cancelHung
	cancelRace
	cancelCharged
)

func (k kind) String() string {
	return [...]string{"success", "declined", "out-of-stock", "cancel-hung", "cancel-race", "cancel-after-charge"}[k]
}

const orderCount = 300

type placed struct {
	i      int
	kind   kind
	req    ordersvc.CreateRequest
	id     string
	want   ordersvc.State
	cancel int // status of the cancel request, if any
}

func plan(i int) placed {
	p := placed{i: i}
	customer := fmt.Sprintf("c-%d", 1+i%20)
	items := []events.Item{{SKU: fmt.Sprintf("sku-%d", 1+i%5), Qty: 1 + i%3}}
	if i%4 == 0 {
		items = append(items, events.Item{SKU: fmt.Sprintf("sku-%d", 1+(i+1)%5), Qty: 1})
	}
	amount := int64(1000 + (i%40)*100)
	switch i % 10 {
	case 7:
		p.kind, customer = declined, "c-poor"
	case 8:
		p.kind = outOfStock
		if i%20 == 8 {
			items = []events.Item{{SKU: "sku-rare", Qty: 1}}
		} else {
			items = []events.Item{{SKU: "sku-2", Qty: 2}, {SKU: "sku-rare", Qty: 1}}
		}
	case 9:
		switch i % 40 {
		case 9, 29:
			p.kind, customer = cancelHung, "c-hang"
		case 19:
			p.kind = cancelRace
		case 39:
			p.kind = cancelCharged
		}
	}
	p.req = ordersvc.CreateRequest{CustomerID: customer, Items: items, Amount: amount}
	p.want = map[kind]ordersvc.State{success: ordersvc.Confirmed, declined: ordersvc.Rejected,
		outOfStock: ordersvc.Rejected, cancelHung: ordersvc.Cancelled, cancelRace: ordersvc.Cancelled,
		cancelCharged: ordersvc.Cancelled}[p.kind]
	return p
}

// TestSaga places the orders once and checks end states and invariants.
func TestSaga(t *testing.T) {
	runSaga(t, false)
}

// TestSagaWithDuplicates does the same while every event on the saga's topics is
// delivered twice and every HTTP request is sent twice (with its Idempotency-Key).
func TestSagaWithDuplicates(t *testing.T) {
	runSaga(t, true)
}

func runSaga(t *testing.T, duplicate bool) {
	s := startSystem(t)
	var dup *duplicator
	var extraGroups []string
	if duplicate {
		dup = startDuplicator(t, s.brokers)
		extraGroups = append(extraGroups, dup.Group)
	}

	orders := placeOrders(t, s, duplicate)
	if t.Failed() {
		t.FailNow()
	}

	// Every order reaches a terminal state, then nothing is left in flight.
	waitFor(t, "every order terminal", func() (bool, string) {
		n := s.count(t, "order", "SELECT count(*) FROM orders WHERE state IN ('PENDING', 'CANCELLING')")
		return n == 0, fmt.Sprintf("%d orders not terminal", n)
	})
	waitFor(t, "quiescence", func() (bool, string) { return s.quiescent(t, extraGroups...) })

	checkOrders(t, s, orders)
	checkPayment(t, s, orders)
	checkInventory(t, s, orders)
	if n := s.count(t, "order", "SELECT count(*) FROM choreo_outbox_dead") +
		s.count(t, "payment", "SELECT count(*) FROM choreo_outbox_dead") +
		s.count(t, "inventory", "SELECT count(*) FROM choreo_outbox_dead"); n != 0 {
		t.Errorf("%d outbox rows were dead-lettered", n)
	}
	if n := s.deadLettered(t); n != 0 {
		t.Errorf("%d records in the dead-letter topics", n)
	}
	// Batch mode (CONSUMER_BATCH, on by default) shares a transaction among records that
	// were waiting; how many batches form depends on timing, so this only reports them.
	for _, svc := range []string{"order", "payment", "inventory"} {
		t.Logf("%s committed %.0f batches holding %.0f records", svc,
			s.metric(t, svc, "choreo_consumer_batch_size_count"), s.metric(t, svc, "choreo_consumer_batch_size_sum"))
	}
	if duplicate {
		// Every event was copied: at least one copy per order.created.
		if c := dup.Copies(); c < orderCount {
			t.Errorf("duplicator copied %d records; want at least %d", c, orderCount)
		}
		// Each service's consumer saw copies and absorbed them as duplicates.
		for _, svc := range []string{"order", "payment", "inventory"} {
			n := s.metric(t, svc, "choreo_consumer_outcomes_total", `choreo_outcome="duplicate"`)
			if n == 0 {
				t.Errorf("%s: no duplicate deliveries recorded", svc)
			}
			t.Logf("%s absorbed %.0f duplicate deliveries", svc, n)
		}
		t.Logf("duplicator re-delivered %d events", dup.Copies())
	}
}

// placeOrders places every order over HTTP with a few concurrent clients, and cancels the
// cancel-kinds right after placement.
func placeOrders(t *testing.T, s *system, duplicate bool) []placed {
	orders := make([]placed, orderCount)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				p := plan(i)
				key := fmt.Sprintf("e2e-%d", i)
				var o ordersvc.OrderJSON
				if st := s.post(t, "/orders", p.req, key, &o); st != http.StatusCreated {
					t.Errorf("order %d: POST status %d", i, st)
					continue
				}
				p.id = o.ID
				if duplicate {
					var again ordersvc.OrderJSON
					if st := s.post(t, "/orders", p.req, key, &again); st != http.StatusOK || again.ID != o.ID {
						t.Errorf("order %d: replayed POST: status %d, id %s; want 200 and %s", i, st, again.ID, o.ID)
					}
				}
				if p.kind == cancelCharged {
					s.waitCharged(t, o.ID)
				}
				if p.kind == cancelHung || p.kind == cancelRace || p.kind == cancelCharged {
					var c ordersvc.OrderJSON
					p.cancel = s.post(t, "/orders/"+o.ID+"/cancel", nil, "", &c)
					if duplicate {
						if st := s.post(t, "/orders/"+o.ID+"/cancel", nil, "", &c); st != p.cancel {
							t.Errorf("order %d: repeated cancel: status %d, first %d", i, st, p.cancel)
						}
					}
					switch {
					case p.cancel == http.StatusAccepted:
					case p.cancel == http.StatusConflict && p.kind != cancelHung:
						p.want = ordersvc.Confirmed // the saga won the race
					default:
						t.Errorf("order %d (%s): cancel status %d", i, p.kind, p.cancel)
					}
				}
				orders[i] = p
			}
		})
	}
	for i := range orderCount {
		next <- i
	}
	close(next)
	wg.Wait()
	return orders
}

// checkOrders: every order is in its expected state, and the order service recorded
// its trace and a history ending in that state.
func checkOrders(t *testing.T, s *system, orders []placed) {
	t.Helper()
	rows, err := s.db["order"].Query(context.Background(),
		`SELECT o.id::text, o.state, o.trace_id, h.to_state
		 FROM orders o JOIN LATERAL (SELECT to_state FROM order_history WHERE order_id = o.id AND NOT ignored ORDER BY id DESC LIMIT 1) h ON true`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ state, trace, last string }
	got := map[string]row{}
	for rows.Next() {
		var id string
		var r row
		if err := rows.Scan(&id, &r.state, &r.trace, &r.last); err != nil {
			t.Fatal(err)
		}
		got[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != orderCount {
		t.Fatalf("order service holds %d orders; want %d", len(got), orderCount)
	}
	tally := map[string]int{}
	for _, p := range orders {
		r := got[p.id]
		tally[fmt.Sprintf("%s->%s", p.kind, r.state)]++
		if ordersvc.State(r.state) != p.want || r.last != r.state || r.trace == "" {
			t.Errorf("order %d (%s, %s): state %s, last history entry %s, trace %q; want %s",
				p.i, p.kind, p.id, r.state, r.last, r.trace, p.want)
		}
	}
	t.Logf("end states: %v", tally)
	t.Logf("races seen by the order service: %d reservations arrived while CANCELLING, %d events after their effect",
		s.count(t, "order", "SELECT count(*) FROM order_history WHERE from_state = 'CANCELLING' AND cause_event_type = 'stock.reserved'"),
		s.count(t, "order", "SELECT count(*) FROM order_history WHERE from_state IN ('CONFIRMED', 'REJECTED', 'CANCELLED')"))
	// Every event was applied at most once, duplicates included.
	if n := s.count(t, "order", `SELECT count(*) FROM (SELECT cause_event_id FROM order_history
		WHERE cause_event_id <> '' GROUP BY 1 HAVING count(*) > 1) d`); n != 0 {
		t.Errorf("%d events were applied more than once", n)
	}
	// The transition table anticipates every interleaving the saga produces: no event
	// was flagged as invalid.
	if n := s.count(t, "order", "SELECT count(*) FROM order_history WHERE ignored"); n != 0 {
		rows, err := s.db["order"].Query(context.Background(),
			"SELECT from_state, cause_event_type, count(*) FROM order_history WHERE ignored GROUP BY 1, 2")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var st, typ string
			var c int
			if err := rows.Scan(&st, &typ, &c); err != nil {
				t.Fatal(err)
			}
			t.Errorf("%d x %s ignored in %s", c, typ, st)
		}
	}
}

// checkPayment: money is conserved; each order was charged at most once; refunds went
// only to charged orders that were not confirmed; what payment kept equals the total of
// the confirmed orders.
func checkPayment(t *testing.T, s *system, orders []placed) {
	t.Helper()
	a, err := paymentsvc.TakeAudit(context.Background(), s.db["payment"])
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Conserved(); err != nil {
		t.Error(err)
	}
	var confirmedTotal int64
	for _, p := range orders {
		po, seen := a.Orders[p.id]
		if po.Charges > 1 || po.Refunds > 1 || po.Refunds > po.Charges || po.Refunded > po.Charged {
			t.Errorf("order %d (%s): %d charges, %d refunds, charged %d, refunded %d", p.i, p.kind, po.Charges, po.Refunds, po.Charged, po.Refunded)
		}
		switch {
		case !seen && p.kind != cancelHung && p.kind != cancelRace && p.kind != cancelCharged:
			t.Errorf("order %d (%s): payment never saw it", p.i, p.kind)
		case p.want == ordersvc.Confirmed:
			confirmedTotal += p.req.Amount
			if po.Charges != 1 || po.Refunds != 0 || po.Charged != p.req.Amount {
				t.Errorf("confirmed order %d: payment %+v; want one charge of %d and no refund", p.i, po, p.req.Amount)
			}
		case p.kind == declined:
			if po.Charges != 0 || po.Status != paymentsvc.StatusDeclined {
				t.Errorf("declined order %d: payment %+v", p.i, po)
			}
		case p.kind == outOfStock:
			if po.Charges != 1 || po.Refunds != 1 || po.Charged != po.Refunded {
				t.Errorf("out-of-stock order %d: payment %+v; want charged and refunded", p.i, po)
			}
		default: // cancelled
			if po.Charged != po.Refunded {
				t.Errorf("cancelled order %d (%s): payment %+v kept money", p.i, p.kind, po)
			}
			if p.kind == cancelHung && po.Charges != 0 {
				t.Errorf("hung order %d was charged: %+v", p.i, po)
			}
		}
	}
	if a.Captured != confirmedTotal {
		t.Errorf("payment kept %d; the confirmed orders total %d", a.Captured, confirmedTotal)
	}
}

// checkInventory: stock is conserved, nothing stays reserved, and what is sold is
// exactly what the confirmed orders asked for.
func checkInventory(t *testing.T, s *system, orders []placed) {
	t.Helper()
	a, err := inventorysvc.TakeAudit(context.Background(), s.db["inventory"])
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Conserved(); err != nil {
		t.Error(err)
	}
	sold := map[string]int64{}
	for _, p := range orders {
		r := a.Orders[p.id]
		held := r.Status == inventorysvc.StatusReserved || r.Status == inventorysvc.StatusCommitted
		if p.want == ordersvc.Confirmed {
			if r.Status != inventorysvc.StatusCommitted {
				t.Errorf("confirmed order %d: reservation %+v; want committed", p.i, r)
			}
			for _, it := range p.req.Items {
				sold[it.SKU] += int64(it.Qty)
			}
		} else if held {
			t.Errorf("order %d (%s) ended %s but inventory holds stock: %+v", p.i, p.kind, p.want, r)
		}
	}
	for sku, st := range a.SKUs {
		if st.Reserved != 0 || st.Committed != sold[sku] {
			t.Errorf("sku %s: %+v; want nothing reserved and %d committed", sku, st, sold[sku])
		}
	}
	if a.SKUs["sku-rare"].Available != 0 {
		t.Errorf("sku-rare: %+v", a.SKUs["sku-rare"])
	}
}
