package inventorysvc

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/events"
)

// harness runs the inventory service in process against real Postgres and Redis and an
// in-process kfake cluster, collecting its logs.
type harness struct {
	*apptest.Instance
	t    *testing.T
	logs *apptest.LogBuffer
}

// startService runs the inventory service with reservations that expire after ttl.
func startService(t *testing.T, ttl time.Duration) *harness {
	t.Helper()
	h := &harness{t: t, logs: &apptest.LogBuffer{}}
	h.Instance = apptest.StartApp(t, apptest.NewInfra(t), "inventory", func(ctx context.Context, ac app.Config, opts []app.Option) error {
		ac.LogLevel = slog.LevelInfo
		return Run(ctx, Config{
			App:            ac,
			Group:          "inventory",
			Stock:          testStock,
			ReservationTTL: ttl,
			SweepInterval:  50 * time.Millisecond,
			// The otel globals stay on: outbox.Enqueue and the relay propagate trace
			// context through the global propagator.
			AppOptions: append(opts, app.WithLogOutput(h.logs)),
		})
	})
	return h
}

// settled waits until the inventory group caught up on topics and the outbox is drained.
func (h *harness) settled(topics ...string) {
	h.t.Helper()
	h.WaitSettled(h.Pool, "", map[string][]string{"inventory": topics})
}

func describe(evs []event.Event) string {
	var s []string
	for _, ev := range evs {
		var p events.StockV1
		_ = ev.DecodeData(&p)
		items := make([]string, 0, len(p.Items))
		for _, it := range p.Items {
			items = append(items, fmt.Sprintf("%s:%d", it.SKU, it.Qty))
		}
		s = append(s, ev.Type+"("+p.Reason+";"+strings.Join(items, " ")+")")
	}
	return strings.Join(s, ",")
}

// TestServiceThroughKafka drives the inventory service through Kafka with every input
// record delivered twice, including a cancel that overtakes its payment.
func TestServiceThroughKafka(t *testing.T) {
	h := startService(t, time.Hour)
	ord := func(name string) string { return name + "-" + testenv.Name(t, "o") }
	var (
		confirm = ord("confirm")
		rare    = ord("rare")
		cancel  = ord("cancel")
		early   = ord("early")
		ghost   = ord("ghost")
	)
	// Phase 1: payments arrive; the early order's cancel overtakes its payment.
	// The order service announces every order first (an unknown one is held, below).
	h.ProduceTwice(events.TopicOrders, created(t, early), cancelRequested(t, early),
		created(t, confirm, item("sku-1", 2)), created(t, rare, item("sku-1", 1), item("sku-rare", 1)),
		created(t, cancel, item("sku-2", 3)))
	h.settled(events.TopicOrders)
	h.ProduceTwice(events.TopicPayments,
		authorized(t, confirm, item("sku-1", 2)),
		authorized(t, rare, item("sku-1", 1), item("sku-rare", 1)),
		authorized(t, cancel, item("sku-2", 3)),
		authorized(t, early, item("sku-1", 1)),
		apptest.NewEvent(t, events.SourcePayment, events.PaymentDeclined, rare, events.PaymentV1{OrderID: rare}), // ignored
		authorized(t, ghost, item("sku-1", 5)))                                                                   // never announced: held, changes nothing
	h.settled(events.TopicOrders, events.TopicPayments)

	// Phase 2: the order service decides.
	h.ProduceTwice(events.TopicOrders, confirmed(t, confirm), cancelRequested(t, cancel))
	h.settled(events.TopicOrders, events.TopicPayments)

	got := h.Events(events.TopicInventory)
	apptest.WantEvents(t, got, describe, map[string]string{
		confirm: "stock.reserved(;sku-1:2)",
		rare:    "stock.unavailable(insufficient stock for sku-rare;sku-1:1 sku-rare:1)",
		cancel:  "stock.reserved(;sku-2:3),stock.released(cancelled;sku-2:3)",
		early:   "stock.released(nothing reserved;),stock.unavailable(order cancelled;sku-1:1)",
	})
	if dlq := h.ReadAll(consumer.DeadLetterTopic(events.TopicPayments)); len(dlq) != 0 {
		t.Errorf("%d records dead-lettered", len(dlq))
	}
	a := audit(t, h.Pool)
	if _, ok := a.Orders[ghost]; ok || len(got[ghost]) != 0 {
		t.Errorf("a payment for an order never announced changed inventory: %+v, emitted %v", a.Orders[ghost], got[ghost])
	}
	if a.Orders[confirm].Status != StatusCommitted || a.Orders[cancel].Status != StatusReleased ||
		a.Orders[early].Status != StatusUnavailable || a.SKUs["sku-1"].Available != 8 || a.SKUs["sku-2"].Available != 5 {
		t.Errorf("audit: %+v", a)
	}

	if !strings.Contains(apptest.Metrics(t, h.BaseURL), "inventory_operations_total") {
		t.Errorf("/metrics lacks inventory_operations_total")
	}
	if err := h.Stop(); err != nil {
		t.Fatalf("graceful shutdown: %v", err)
	}
}

// With a tiny TTL the running service's sweeper releases an unconfirmed reservation and
// says so on inventory.events.
func TestReservationExpiresInService(t *testing.T) {
	h := startService(t, time.Millisecond)
	o := "expire-" + testenv.Name(t, "o")
	h.ProduceTwice(events.TopicOrders, created(t, o, item("sku-2", 4)))
	h.ProduceTwice(events.TopicPayments, authorized(t, o, item("sku-2", 4)))
	apptest.WaitFor(t, "the reservation to expire", func() bool {
		var st string
		err := h.Pool.QueryRow(context.Background(), `SELECT status FROM inventory_reservations WHERE order_id = $1`, o).Scan(&st)
		return err == nil && st == StatusExpired
	})
	h.settled(events.TopicPayments)
	if g := describe(h.Events(events.TopicInventory)[o]); g != "stock.reserved(;sku-2:4),stock.released(reservation expired;sku-2:4)" {
		t.Fatalf("emitted %s", g)
	}
	if a := audit(t, h.Pool); a.SKUs["sku-2"].Available != 5 {
		t.Fatalf("sku-2: %+v", a.SKUs["sku-2"])
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
}
