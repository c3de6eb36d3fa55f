package ordersvc_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

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
		s.JaegerUIURL != "http://jaeger:16686" || c.Group != "order" || c.App.HTTPAddr != "127.0.0.1:8080" {
		t.Fatalf("config %+v", c)
	}

	// The API listens on loopback unless told otherwise.
	if !app.Loopback(c.App.HTTPAddr) {
		t.Errorf("default HTTP_ADDR %s listens beyond loopback", c.App.HTTPAddr)
	}

	if c.MaxInFlight != int(c.App.DatabaseMaxConns) || c.MaxInFlight == 0 {
		t.Fatalf("max in flight %d, want the pool size %d", c.MaxInFlight, c.App.DatabaseMaxConns)
	}
	off := app.MapEnv(map[string]string{"HTTP_MAX_IN_FLIGHT": "0"})
	if c := ordersvc.LoadConfig(off); off.Err() != nil || c.MaxInFlight != 0 {
		t.Fatalf("HTTP_MAX_IN_FLIGHT=0: %d, %v", c.MaxInFlight, off.Err())
	}
	if c.MaxPending != ordersvc.DefaultMaxPending {
		t.Fatalf("max pending %d, want the default %d", c.MaxPending, ordersvc.DefaultMaxPending)
	}
	noPending := app.MapEnv(map[string]string{ordersvc.EnvMaxPending: "0"})
	if c := ordersvc.LoadConfig(noPending); noPending.Err() != nil || c.MaxPending != 0 {
		t.Fatalf("ORDER_MAX_PENDING=0: %d, %v", c.MaxPending, noPending.Err())
	}

	if s.CompensationRetries != ordersvc.DefaultCompensationRetries {
		t.Fatalf("compensation retries %d, want the default", s.CompensationRetries)
	}
	none := app.MapEnv(map[string]string{"ORDER_COMPENSATION_RETRIES": "0"})
	if c := ordersvc.LoadConfig(none); none.Err() != nil || c.Settings.CompensationRetries != ordersvc.NoCompensationRetries {
		t.Fatalf("ORDER_COMPENSATION_RETRIES=0: %d, %v", c.Settings.CompensationRetries, none.Err())
	}

	bad := app.MapEnv(map[string]string{
		"ORDER_STUCK_AFTER": "5m", "ORDER_SAGA_TIMEOUT": "1m", "ORDER_COMPENSATION_TIMEOUT": "soon",
		"ORDER_SWEEP_INTERVAL": "0s", "ORDER_COMPENSATION_RETRIES": "21", "HTTP_MAX_IN_FLIGHT": "-1",
		"ORDER_MAX_PENDING": "-5", "JAEGER_UI_URL": "localhost:16686",
	})
	ordersvc.LoadConfig(bad)
	apptest.WantConfigError(t, bad, "ORDER_SAGA_TIMEOUT", "must be longer than ORDER_STUCK_AFTER", "ORDER_COMPENSATION_TIMEOUT", "ORDER_SWEEP_INTERVAL",
		"ORDER_COMPENSATION_RETRIES", "HTTP_MAX_IN_FLIGHT", "ORDER_MAX_PENDING", "JAEGER_UI_URL", "not an absolute URL")
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
	base := runService(t, cfg, ns)
	ctx := context.Background()

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
	declined := apptest.NewEvent(t, events.SourcePayment, events.PaymentDeclined, o.ID,
		events.PaymentV1{OrderID: o.ID, CustomerID: "c-1", Amount: 4200, Reason: "over limit"})
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
	if metrics := apptest.Metrics(t, base); !strings.Contains(metrics, "choreo_order_transitions") {
		t.Fatalf("metrics lack choreo_order_transitions:\n%.2000s", metrics)
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
	ctx, cancel := context.WithTimeout(context.Background(), apptest.DefaultTimeout)
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

// TestRunResendsCompensation runs the whole service with short compensation deadlines and
// nobody answering its cancellation: the sweeper re-sends order.cancel_requested
// ORDER_COMPENSATION_RETRIES times through the relay (same saga, new event ids), then the
// order is COMPENSATION_FAILED; payment's late answer heals it to CANCELLED.
func TestRunResendsCompensation(t *testing.T) {
	brokers := testenv.Kafka(t)
	_, ns := testenv.Redis(t)
	env := app.MapEnv(map[string]string{
		"DATABASE_URL": testenv.PostgresDSN(t), "REDIS_ADDR": testenv.RedisAddr(t),
		"KAFKA_BROKERS": strings.Join(brokers, ","), "KAFKA_PARTITIONS": "2", "ORDER_SWEEP_INTERVAL": "50ms",
		"ORDER_COMPENSATION_TIMEOUT": "150ms", "ORDER_COMPENSATION_RETRIES": "2",
	})
	cfg := ordersvc.LoadConfig(env)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	if cfg.Settings.CompensationRetries != 2 {
		t.Fatalf("retries %d", cfg.Settings.CompensationRetries)
	}
	base := runService(t, cfg, ns)
	ctx := context.Background()
	resp, err := http.Post(base+"/orders", "application/json", strings.NewReader(validBody))
	if err != nil {
		t.Fatal(err)
	}
	var o ordersvc.OrderJSON
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp, err = http.Post(base+"/orders/"+o.ID+"/cancel", "application/json", nil); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %v %v", resp, err)
	}
	resp.Body.Close()

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(events.TopicOrders),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var sends []event.Event
	for len(sends) < 3 {
		ev, err := event.FromRecord(nextRecord(t, cl, events.TopicOrders))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == events.OrderCancelRequested {
			sends = append(sends, ev)
		}
	}
	for i, ev := range sends {
		p := apptest.DecodeData[events.OrderCancelRequestedV1](t, ev)
		if p.Attempt != i+1 || ev.CorrelationID != o.ID || ev.Subject != o.ID || (i > 0 && ev.ID == sends[i-1].ID) {
			t.Fatalf("send %d: %+v %+v", i+1, ev, p)
		}
	}
	var g ordersvc.OrderJSON
	apptest.WaitFor(t, "COMPENSATION_FAILED", func() bool {
		getJSON(t, base+"/orders/"+o.ID, &g)
		return g.State == ordersvc.CompensationFailed
	})
	if g.CompensationAttempts != 3 {
		t.Fatalf("order %+v", g)
	}

	// Payment answers late (it had charged nothing): the order heals to CANCELLED.
	declined := apptest.NewEvent(t, events.SourcePayment, events.PaymentDeclined, o.ID,
		events.PaymentV1{OrderID: o.ID, CustomerID: "c-1", Reason: "cancelled"})
	rec, err := event.ToRecord(events.TopicPayments, declined.CausedBy(sends[2]))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := event.FromRecord(nextRecord(t, cl, events.TopicOrders))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == events.OrderCancelled && ev.Subject == o.ID {
			break
		}
		if ev.Type == events.OrderCancelRequested {
			t.Fatalf("a fourth cancellation was sent: %+v", ev)
		}
	}
	getJSON(t, base+"/orders/"+o.ID, &g)
	if g.State != ordersvc.Cancelled {
		t.Fatalf("order %+v", g)
	}
	if metrics := apptest.Metrics(t, base); !strings.Contains(metrics, "choreo_order_compensation_resends") {
		t.Fatalf("metrics lack choreo_order_compensation_resends")
	}
}

// runService runs the order service with cfg on a free loopback port, its locks under the
// Redis namespace ns, until the test ends; it returns the API's base URL.
func runService(t *testing.T, cfg ordersvc.Config, ns string) string {
	t.Helper()
	return runServiceLogging(t, cfg, ns, io.Discard)
}

// runServiceLogging is runService with the service's logs written to logs.
func runServiceLogging(t *testing.T, cfg ordersvc.Config, ns string, logs io.Writer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.AppOptions = []app.Option{app.WithListener(ln), app.WithoutSignals(), app.WithLogOutput(logs),
		app.WithLockOptions(lock.WithNamespace(ns))}
	base := "http://" + ln.Addr().String()
	svc := apptest.Start(t, base, func(ctx context.Context) error { return ordersvc.Run(ctx, cfg) })
	t.Cleanup(func() {
		if err := svc.Stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return base
}
