package ordersvc_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

// hangGuard bounds waits for things that must happen; it is not a performance bound.
const hangGuard = time.Minute

func TestLoadConfig(t *testing.T) {
	env := app.MapEnv(map[string]string{
		"ORDER_STUCK_AFTER": "10s", "ORDER_SAGA_TIMEOUT": "1m", "ORDER_COMPENSATION_TIMEOUT": "3m",
		"ORDER_SWEEP_INTERVAL": "250ms", "JAEGER_UI_URL": "http://jaeger:16686",
	})
	c := ordersvc.LoadConfig(env)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	s := c.Settings
	if s.StuckAfter[ordersvc.Pending] != 10*time.Second || s.StuckAfter[ordersvc.Cancelling] != 10*time.Second ||
		s.SagaTimeout != time.Minute || s.CompensationTimeout != 3*time.Minute || s.SweepInterval != 250*time.Millisecond ||
		s.JaegerUIURL != "http://jaeger:16686" || c.Group != "order" || c.App.HTTPAddr != ":8080" {
		t.Fatalf("config %+v", c)
	}

	bad := app.MapEnv(map[string]string{
		"ORDER_STUCK_AFTER": "5m", "ORDER_SAGA_TIMEOUT": "1m", "ORDER_COMPENSATION_TIMEOUT": "soon",
		"ORDER_SWEEP_INTERVAL": "0s",
	})
	ordersvc.LoadConfig(bad)
	err := bad.Err()
	if !errors.Is(err, app.ErrConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"ORDER_SAGA_TIMEOUT", "must be longer than ORDER_STUCK_AFTER", "ORDER_COMPENSATION_TIMEOUT", "ORDER_SWEEP_INTERVAL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestRun runs the whole service (app plumbing, consumer, relay, sweeper) against real
// Postgres, Redis and an in-process Kafka broker, and plays payment's part by hand.
func TestRun(t *testing.T) {
	brokers := testenv.Kafka(t)
	_, ns := testenv.Redis(t)
	env := app.MapEnv(map[string]string{
		"DATABASE_URL": testenv.PostgresDSN(t), "REDIS_ADDR": testenv.RedisAddr(t),
		"KAFKA_BROKERS": strings.Join(brokers, ","), "KAFKA_PARTITIONS": "2", "ORDER_SWEEP_INTERVAL": "100ms",
	})
	cfg := ordersvc.LoadConfig(env)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.AppOptions = []app.Option{app.WithListener(ln), app.WithoutSignals(), app.WithLogOutput(io.Discard),
		app.WithLockOptions(lock.Options{Namespace: ns})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ordersvc.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(hangGuard):
			t.Error("Run did not return after cancel")
		}
	})
	base := "http://" + ln.Addr().String()
	waitFor(t, "readyz 200", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// Place an order: order.created reaches Kafka through the relay.
	resp, err := http.Post(base+"/orders", "application/json", strings.NewReader(validBody))
	if err != nil {
		t.Fatal(err)
	}
	var o ordersvc.OrderJSON
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(events.TopicOrders, events.TopicPayments+".dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	created := nextRecord(t, cl, events.TopicOrders)
	ev, err := event.FromRecord(created)
	if err != nil || ev.Type != events.OrderCreated || ev.Subject != o.ID {
		t.Fatalf("first record: %+v, %v", ev, err)
	}

	// Payment declines: the consumer rejects the order.
	declined, err := event.New(events.SourcePayment, events.PaymentDeclined, o.ID,
		events.PaymentV1{OrderID: o.ID, CustomerID: "c-1", Amount: 4200, Reason: "over limit"})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := event.ToRecord(events.TopicPayments, declined.CausedBy(ev))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rejected := nextRecord(t, cl, events.TopicOrders)
	if ev, err := event.FromRecord(rejected); err != nil || ev.Type != events.OrderRejected || ev.CausationID != declined.ID {
		t.Fatalf("second record: %+v, %v", ev, err)
	}
	var g ordersvc.OrderJSON
	getJSON(t, base+"/orders/"+o.ID, &g)
	if g.State != ordersvc.Rejected || g.Reason != "payment declined: over limit" || g.History[1].CauseEventID != declined.ID {
		t.Fatalf("order %+v", g)
	}

	// An undecodable record is dead-lettered, not retried forever.
	bad := &kgo.Record{Topic: events.TopicPayments, Key: []byte(o.ID), Value: []byte("{")}
	if err := cl.ProduceSync(ctx, bad).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if dlq := nextRecord(t, cl, events.TopicPayments+".dlq"); string(dlq.Key) != o.ID {
		t.Fatalf("dlq record key %q", dlq.Key)
	}

	// The deadline sweeper runs in the service: an order past its saga deadline is
	// cancelled and compensation is requested (the clock is moved, not waited for).
	resp, err = http.Post(base+"/orders", "application/json", strings.NewReader(validBody))
	if err != nil {
		t.Fatal(err)
	}
	var late ordersvc.OrderJSON
	if err := json.NewDecoder(resp.Body).Decode(&late); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	db, err := pgxpool.New(ctx, cfg.App.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(ctx, "UPDATE orders SET deadline_at = now() - interval '1 second' WHERE id = $1", late.ID); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := event.FromRecord(nextRecord(t, cl, events.TopicOrders))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Subject == late.ID && ev.Type == events.OrderCancelRequested {
			break
		}
	}
	getJSON(t, base+"/orders/"+late.ID, &g)
	if g.State != ordersvc.Cancelling || !strings.HasPrefix(g.Reason, "saga deadline exceeded") {
		t.Fatalf("expired order %+v", g)
	}

	// /metrics exposes the order metrics.
	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "choreo_order_transitions") {
		t.Fatalf("metrics lack choreo_order_transitions:\n%.2000s", body)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// nextRecord returns the next record of topic polled by cl (records of other topics
// are skipped).
func nextRecord(t *testing.T, cl *kgo.Client, topic string) *kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	for {
		fs := cl.PollRecords(ctx, 1)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no record on %s: %v", topic, err)
		}
		for _, r := range fs.Records() {
			if r.Topic == topic {
				return r
			}
		}
	}
}
