package ordersvc_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

// TestForgedEventsAreUntrusted replays a forged-event attack against the running order
// service: a payment.authorized with ce_source "evil", then the real payment service's
// payment.authorized and the inventory's stock.reserved each on the wrong topic. Each is
// dead-lettered with reason "untrusted" and the order stays PENDING with no transition.
// The service runs with ORDER_API_TOKEN: its API refuses requests without the token.
func TestForgedEventsAreUntrusted(t *testing.T) {
	const apiToken = "t0ken-for-the-order-api"
	brokers := testenv.Kafka(t)
	_, ns := testenv.Redis(t)
	env := app.MapEnv(map[string]string{
		"DATABASE_URL": testenv.PostgresDSN(t), "REDIS_ADDR": testenv.RedisAddr(t),
		"KAFKA_BROKERS": strings.Join(brokers, ","), "KAFKA_PARTITIONS": "1", "ORDER_API_TOKEN": apiToken,
	})
	cfg := ordersvc.LoadConfig(env)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	base := runService(t, cfg, ns)

	// ORDER_API_TOKEN: the API needs the token, /healthz does not.
	resp, err := http.Post(base+"/orders", "application/json", strings.NewReader(validBody))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST /orders without the token: %d, want 401", resp.StatusCode)
	}
	if resp, err := http.Get(base + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz without the token: %v %v", resp, err)
	}
	req, _ := http.NewRequest("POST", base+"/orders", strings.NewReader(validBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiToken)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	var o ordersvc.OrderJSON
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()

	items := []events.Item{{SKU: "sku-1", Qty: 2}}
	forged := []struct {
		source, typ, topic string
		data               any
	}{
		{"evil", events.PaymentAuthorized, events.TopicPayments, events.PaymentV1{OrderID: o.ID, CustomerID: "c-1", Amount: 4200, Items: items}},
		{events.SourcePayment, events.PaymentAuthorized, events.TopicInventory, events.PaymentV1{OrderID: o.ID, CustomerID: "c-1", Amount: 4200, Items: items}},
		{events.SourceInventory, events.StockReserved, events.TopicPayments, events.StockV1{OrderID: o.ID, Items: items}},
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(events.TopicPayments+".dlq", events.TopicInventory+".dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	for _, f := range forged {
		rec, err := event.ToRecord(f.topic, apptest.NewEvent(t, f.source, f.typ, o.ID, f.data))
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		dlq := nextRecord(t, cl, f.topic+".dlq")
		var reason string
		for _, h := range dlq.Headers {
			if h.Key == consumer.HeaderDLQReason {
				reason = string(h.Value)
			}
		}
		if reason != consumer.ReasonUntrusted || string(dlq.Key) != o.ID {
			t.Errorf("%s from %s on %s: dead letter %q with reason %q, want untrusted", f.typ, f.source, f.topic, dlq.Key, reason)
		}
	}
	req, _ = http.NewRequest("GET", base+"/orders/"+o.ID, nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var g ordersvc.OrderJSON
	if err := json.NewDecoder(resp.Body).Decode(&g); err != nil {
		t.Fatal(err)
	}
	if g.State != ordersvc.Pending || len(g.History) != 1 {
		t.Errorf("order after forged events: state %s, %d history entries; want PENDING and 1", g.State, len(g.History))
	}
}
