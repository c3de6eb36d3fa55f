package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/inventory/inventorysvc"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
	"github.com/choreo-saga/choreo/services/payment/paymentsvc"
)

// startSaga runs the three real services in this process against the test Postgres,
// Redis and Kafka-protocol broker, and returns the order service's base URL.
func startSaga(t *testing.T) string {
	t.Helper()
	brokers := testenv.Kafka(t)
	redisAddr := testenv.RedisAddr(t)
	logs := &apptest.LogBuffer{} // the services' logs, shown when the test fails
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	common := func(extra map[string]string) *app.Env {
		env := map[string]string{
			app.EnvDatabaseURL:  testenv.PostgresDSN(t),
			app.EnvRedisAddr:    redisAddr,
			app.EnvKafkaBrokers: strings.Join(brokers, ","),
			app.EnvHTTPAddr:     "127.0.0.1:0",
			app.EnvLogLevel:     "warn",
		}
		for k, v := range extra {
			env[k] = v
		}
		return app.MapEnv(env)
	}
	opts := func(ln net.Listener) []app.Option {
		o := []app.Option{app.WithoutSignals(), app.WithLogOutput(logs)}
		if ln != nil {
			o = append(o, app.WithListener(ln))
		}
		return o
	}
	run := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && ctx.Err() == nil {
				t.Errorf("%s service stopped: %v", name, err)
			}
		}()
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A PENDING order counts as stuck after 2s here, so `load -wait-stuck` and `stuck`
	// see the hung order quickly; the saga deadline stays far away.
	oenv := common(map[string]string{ordersvc.EnvStuckAfter: "2s", ordersvc.EnvSagaTimeout: "10m",
		ordersvc.EnvSweepInterval: "200ms", app.EnvJaegerUIURL: "http://localhost:16686"})
	ocfg := ordersvc.LoadConfig(oenv)
	penv := common(map[string]string{paymentsvc.EnvHangCustomers: "c-hang"})
	pcfg := paymentsvc.LoadConfig(penv)
	ienv := common(nil)
	icfg := inventorysvc.LoadConfig(ienv)
	if err := errors.Join(oenv.Err(), penv.Err(), ienv.Err()); err != nil {
		t.Fatal(err)
	}
	ocfg.AppOptions, pcfg.AppOptions, icfg.AppOptions = opts(ln), opts(nil), opts(nil)
	// Registered after the databases, so the services stop before testenv drops them.
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if t.Failed() {
			t.Logf("service logs:\n%s", logs.String())
		}
	})
	run("order", func() error { return ordersvc.Run(ctx, ocfg) })
	run("payment", func() error { return paymentsvc.Run(ctx, pcfg) })
	run("inventory", func() error { return inventorysvc.Run(ctx, icfg) })

	base := "http://" + ln.Addr().String()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("order service not ready at %s: %v\n%s", base, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sagactlHTTP(t *testing.T, orderURL string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	args = append(args, "-order-url", orderURL)
	code := run(context.Background(), args, stdio{out: &out, err: &errb, getenv: func(string) string { return "" }})
	return code, out.String(), errb.String()
}

// TestAgainstTheSaga drives the real services: load places a mix of orders and waits for
// them, order and stuck inspect the result.
func TestAgainstTheSaga(t *testing.T) {
	orderURL := startSaga(t)

	code, out, errs := sagactlHTTP(t, orderURL, "load", "-n", "12", "-rate", "20", "-seed", "7",
		"-mix", "success=2,decline=1,oos=1,cancel=1,stuck=1", "-wait", "3m", "-json")
	if code != 0 {
		t.Fatalf("load: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	var sum loadSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("load -json: %v\n%s", err, out)
	}
	if sum.Placed != 12 || sum.FailedToPlace != 0 || sum.Unsettled != 0 || sum.Settled != 11 {
		t.Errorf("placed %d, failed %d, settled %d, unsettled %d; want 12, 0, 11, 0", sum.Placed, sum.FailedToPlace, sum.Settled, sum.Unsettled)
	}
	if len(sum.Unexpected) != 0 {
		t.Errorf("orders that ended other than their kind aims for: %+v", sum.Unexpected)
	}
	got := make(map[string]int)
	for _, o := range sum.Outcomes {
		got[o.Outcome] = o.Count
		if !strings.HasPrefix(o.Outcome, "STUCK") && (o.Latency.N != o.Count || o.Latency.P50ms <= 0 || o.Latency.P99ms < o.Latency.P50ms) {
			t.Errorf("outcome %s: latency %+v over %d orders", o.Outcome, o.Latency, o.Count)
		}
	}
	// 11 weighted orders over 5 weight units: success 5 (4.4 → 4, +1 remainder), the rest 2.
	want := map[string]int{"CONFIRMED": 5, "REJECTED (payment.declined)": 2, "STUCK in PENDING": 1}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("outcome %s: %d orders, want %d (all: %v)", k, got[k], n, got)
		}
	}
	// An out-of-stock order is rejected by whichever of payment.refunded and
	// stock.unavailable reaches the order service last (they travel on different topics).
	if n := got["REJECTED (payment.refunded)"] + got["REJECTED (stock.unavailable)"]; n != 2 {
		t.Errorf("out-of-stock orders rejected: %d, want 2 (all: %v)", n, got)
	}
	if got["CANCELLED"]+got["CONFIRMED"]-want["CONFIRMED"] != 2 {
		t.Errorf("the 2 cancel orders did not end CANCELLED (or CONFIRMED when the cancel came late): %v", got)
	}
	if len(sum.Stuck) != 1 {
		t.Fatalf("stuck orders %+v, want the one c-hang order", sum.Stuck)
	}
	stuck := sum.Stuck[0]
	if stuck.Kind != kindStuck || stuck.State != "PENDING" || !stuck.Flagged || stuck.TraceID == "" || stuck.Inspect != "sagactl order "+stuck.ID+" -order-url "+orderURL {
		t.Errorf("stuck order %+v", stuck)
	}

	// sagactl order <id>
	code, out, errs = sagactlHTTP(t, orderURL, "order", stuck.ID, "-json")
	if code != 0 {
		t.Fatalf("order: exit %d: %s", code, errs)
	}
	var o Order
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatal(err)
	}
	if o.ID != stuck.ID || o.CustomerID != "c-hang" || o.State != "PENDING" || !o.Stuck || o.TraceID != stuck.TraceID ||
		!strings.Contains(o.JaegerURL, o.TraceID) || len(o.History) == 0 {
		t.Errorf("order %+v", o)
	}
	code, out, _ = sagactlHTTP(t, orderURL, "order", stuck.ID)
	for _, want := range []string{"state     PENDING  (STUCK)", "customer  c-hang", "trace id  " + stuck.TraceID, "jaeger    http://localhost:16686/",
		"waiting   for payment to answer order.created", "search    http://localhost:16686/search?service=order&tags="} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("order (table) misses %q:\n%s", want, out)
		}
	}

	// sagactl stuck
	code, out, errs = sagactlHTTP(t, orderURL, "stuck", "-json")
	if code != 0 || !strings.Contains(out, stuck.ID) {
		t.Errorf("stuck: exit %d, want %s listed:\n%s%s", code, stuck.ID, out, errs)
	}
	code, out, _ = sagactlHTTP(t, orderURL, "stuck")
	if code != 0 || !strings.Contains(out, "inspect one with: sagactl order "+stuck.ID) {
		t.Errorf("stuck (table):\n%s", out)
	}
	code, out, _ = sagactlHTTP(t, orderURL, "stuck", "-older-than", "1h")
	if code != 0 || !strings.Contains(out, "no stuck orders") {
		t.Errorf("stuck -older-than 1h: exit %d\n%s", code, out)
	}

	// A confirmed order's timeline runs PENDING -> CONFIRMED.
	code, out, _ = sagactlHTTP(t, orderURL, "load", "-n", "1", "-mix", "success=1,stuck=0", "-json")
	if code != 0 {
		t.Fatalf("load of one order: exit %d", code)
	}
	var one loadSummary
	if err := json.Unmarshal([]byte(out), &one); err != nil || len(one.Outcomes) != 1 || one.Outcomes[0].Outcome != "CONFIRMED" {
		t.Fatalf("one order: %v %+v", err, one)
	}

	// Unknown order: exit 1 with the API's not_found.
	code, _, errs = sagactlHTTP(t, orderURL, "order", "01890000-0000-7000-8000-000000000000")
	if code != exitFailure || !strings.Contains(errs, "not_found") {
		t.Errorf("unknown order: exit %d: %s", code, errs)
	}
}
