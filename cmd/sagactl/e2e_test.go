package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// saga is the reference system startSaga runs: the order service's base URL and the
// broker the services use.
type saga struct {
	orderURL string
	brokers  string
}

// startSaga runs the three real services in this process against the test Postgres,
// Redis and Kafka-protocol broker.
func startSaga(t *testing.T) saga {
	t.Helper()
	brokers := testenv.Kafka(t)
	redisAddr := testenv.RedisAddr(t)
	logs := &apptest.LogBuffer{} // the services' logs, shown when the test fails
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	common := func(extra map[string]string) *app.Env {
		env := map[string]string{
			"DATABASE_URL":  testenv.PostgresDSN(t),
			"REDIS_ADDR":    redisAddr,
			"KAFKA_BROKERS": strings.Join(brokers, ","),
			"HTTP_ADDR":     "127.0.0.1:0",
			"LOG_LEVEL":     "warn",
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
		ordersvc.EnvSweepInterval: "200ms", ordersvc.EnvJaegerUIURL: "http://localhost:16686"})
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
				return saga{orderURL: base, brokers: strings.Join(brokers, ",")}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("order service not ready at %s: %v\n%s", base, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sagactlHTTP(t *testing.T, s saga, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	args = append(args, "-order-url", s.orderURL)
	if s.brokers != "" {
		args = append(args, "-brokers", s.brokers)
	}
	code := run(context.Background(), args, stdio{out: &out, err: &errb, getenv: func(string) string { return "" }})
	return code, out.String(), errb.String()
}

// TestAgainstTheSaga drives the real services: load places a mix of orders and waits for
// them, order and stuck inspect the result.
func TestAgainstTheSaga(t *testing.T) {
	sys := startSaga(t)
	orderURL := sys.orderURL

	code, out, errs := sagactlHTTP(t, sys, "load", "-n", "12", "-rate", "20", "-seed", "7",
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
	code, out, errs = sagactlHTTP(t, sys, "order", stuck.ID, "-json")
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
	code, out, _ = sagactlHTTP(t, sys, "order", stuck.ID)
	for _, want := range []string{"state     PENDING  (STUCK)", "customer  c-hang", "trace id  " + stuck.TraceID, "jaeger    http://localhost:16686/",
		"waiting   for payment to answer order.created", "search    http://localhost:16686/search?service=order&tags="} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("order (table) misses %q:\n%s", want, out)
		}
	}

	// sagactl stuck
	code, out, errs = sagactlHTTP(t, sys, "stuck", "-json")
	if code != 0 || !strings.Contains(out, stuck.ID) {
		t.Errorf("stuck: exit %d, want %s listed:\n%s%s", code, stuck.ID, out, errs)
	}
	code, out, _ = sagactlHTTP(t, sys, "stuck")
	if code != 0 || !strings.Contains(out, "inspect one with: sagactl order "+stuck.ID) {
		t.Errorf("stuck (table):\n%s", out)
	}
	code, out, _ = sagactlHTTP(t, sys, "stuck", "-older-than", "1h")
	if code != 0 || !strings.Contains(out, "no stuck orders") {
		t.Errorf("stuck -older-than 1h: exit %d\n%s", code, out)
	}

	// A confirmed order's timeline runs PENDING -> CONFIRMED; the poison record placed with
	// it ends in orders.events.dlq.
	code, out, _ = sagactlHTTP(t, sys, "load", "-n", "1", "-mix", "success=1,stuck=0", "-poison", "1", "-json")
	if code != 0 {
		t.Fatalf("load of one order: exit %d", code)
	}
	var one loadSummary
	if err := json.Unmarshal([]byte(out), &one); err != nil || len(one.Outcomes) != 1 || one.Outcomes[0].Outcome != "CONFIRMED" {
		t.Fatalf("one order: %v %+v", err, one)
	}
	if len(one.Poison) != 1 || one.InspectPoison != "sagactl dlq list orders.events -brokers "+sys.brokers {
		t.Fatalf("poison %v, inspect %q; want one position and the dlq list command", one.Poison, one.InspectPoison)
	}
	var dead struct{ Records []dlqRecord }
	for deadline := time.Now().Add(time.Minute); len(dead.Records) == 0; {
		code, out, errs = sagactlHTTP(t, sys, "dlq", "list", "orders.events", "-json")
		if code != 0 || json.Unmarshal([]byte(out), &dead) != nil {
			t.Fatalf("dlq list orders.events: exit %d: %s%s", code, out, errs)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the poison record at %s is not in orders.events.dlq after a minute", one.Poison[0])
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Payment and inventory both consume orders.events: each dead-letters it once.
	for _, r := range dead.Records {
		if fmt.Sprintf("%d:%d", r.OriginPartition, r.OriginOffset) != one.Poison[0] || r.Reason != "malformed" {
			t.Errorf("dead letter %+v, want the poison record at %s, malformed", r, one.Poison[0])
		}
	}

	// Unknown order: exit 1 with the API's not_found.
	code, _, errs = sagactlHTTP(t, sys, "order", "01890000-0000-7000-8000-000000000000")
	if code != exitFailure || !strings.Contains(errs, "not_found") {
		t.Errorf("unknown order: exit %d: %s", code, errs)
	}
}

// requestCounter is a reverse proxy in front of the order service that counts the
// requests it forwards by kind.
type requestCounter struct {
	mu     sync.Mutex
	target string
	client *http.Client
	counts map[string]int // "place", "cancel", "get" (one order), "list", "other"
}

func (c *requestCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k := "other"
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/orders":
		k = "place"
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/cancel"):
		k = "cancel"
	case r.Method == http.MethodGet && r.URL.Path == "/orders":
		k = "list"
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/orders/"):
		k = "get"
	}
	c.mu.Lock()
	c.counts[k]++
	c.mu.Unlock()
	req, err := http.NewRequestWithContext(r.Context(), r.Method, c.target+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := c.client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// TestLoadLearnsSettlementFromEvents proves that load does not ask the order service
// for each order while it waits: it places orders through a counting proxy, with a fast
// poll so that many ticks pass, and checks that no order was fetched one by one (every
// order settles, so none is left for the final fetch) and that each tick cost at most
// one list query.
func TestLoadLearnsSettlementFromEvents(t *testing.T) {
	sys := startSaga(t)
	counter := &requestCounter{target: sys.orderURL, client: &http.Client{Timeout: 30 * time.Second}, counts: map[string]int{}}
	srv := httptest.NewServer(counter)
	defer srv.Close()
	proxied := saga{orderURL: srv.URL, brokers: sys.brokers}

	const n = 40
	start := time.Now()
	code, out, errs := sagactlHTTP(t, proxied, "load", "-n", strconv.Itoa(n), "-rate", "40", "-seed", "3",
		"-mix", "success=6,decline=1,oos=1,cancel=2,stuck=0", "-poll", "20ms", "-wait", "2m", "-json")
	elapsed := time.Since(start)
	if code != 0 {
		t.Fatalf("load: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	var sum loadSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("load -json: %v\n%s", err, out)
	}
	if sum.Placed != n || sum.Settled != n || sum.Latency.N != n {
		t.Fatalf("placed %d, settled %d, latencies %d; want %d each", sum.Placed, sum.Settled, sum.Latency.N, n)
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	if counter.counts["place"] != n {
		t.Errorf("POST /orders: %d, want %d", counter.counts["place"], n)
	}
	if got := counter.counts["get"]; got != 0 {
		t.Errorf("GET /orders/{id}: %d requests, want 0: settlement must come from the events (counts %v)", got, counter.counts)
	}
	// One list to check the service at start, then at most one per 20 ms tick.
	if maxLists := 2 + int(elapsed/(20*time.Millisecond)); counter.counts["list"] > maxLists {
		t.Errorf("GET /orders (list): %d requests in %s, want at most %d", counter.counts["list"], elapsed, maxLists)
	}
	for _, o := range sum.Outcomes {
		if strings.HasPrefix(o.Outcome, "REJECTED (") || o.Outcome == "CONFIRMED" || o.Outcome == "CANCELLED" {
			continue
		}
		t.Errorf("outcome %q (%d orders): want CONFIRMED, CANCELLED or REJECTED with its cause", o.Outcome, o.Count)
	}
}
