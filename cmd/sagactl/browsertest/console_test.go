package browsertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/inventory/inventorysvc"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
	"github.com/choreo-saga/choreo/services/payment/paymentsvc"
)

// EnvScreenshots names the directory the test writes the pages' PNG screenshots to.
const EnvScreenshots = "CONSOLE_SCREENSHOTS"

// stack is the demo saga started by startStack.
type stack struct {
	orderURL string
	dsn      string // the Postgres of the services and of the saga tracker
	brokers  string
	metrics  string // -metrics of sagactl console
	// failing makes every charge attempt of the payment service fail with its
	// retryable gateway error while set (paymentsvc.Config.Random).
	failing *atomic.Bool
	logs    *apptest.LogBuffer
}

// startStack runs the three services in this process against the test Postgres, Redis
// and Kafka-protocol broker, each with its admin listener (for /metrics).
func startStack(t *testing.T) stack {
	t.Helper()
	brokers := strings.Join(testenv.Kafka(t), ",")
	redisAddr := testenv.RedisAddr(t)
	logs := &apptest.LogBuffer{}
	failing := new(atomic.Bool)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	env := func(extra map[string]string) *app.Env {
		m := map[string]string{
			"DATABASE_URL":          testenv.PostgresDSN(t),
			"REDIS_ADDR":            redisAddr,
			"KAFKA_BROKERS":         brokers,
			"LOG_LEVEL":             "warn",
			ordersvc.EnvJaegerUIURL: "http://localhost:16686",
		}
		for k, v := range extra {
			m[k] = v
		}
		return app.MapEnv(m)
	}
	// A PENDING order is stuck after 2s, so the overview shows the held order at once.
	oenv := env(map[string]string{ordersvc.EnvStuckAfter: "2s", ordersvc.EnvSagaTimeout: "10m", ordersvc.EnvSweepInterval: "500ms"})
	penv := env(map[string]string{paymentsvc.EnvHangCustomers: "c-hang", paymentsvc.EnvFailureRate: "0.5"})
	ienv := env(nil)
	ocfg, pcfg, icfg := ordersvc.LoadConfig(oenv), paymentsvc.LoadConfig(penv), inventorysvc.LoadConfig(ienv)
	if err := errors.Join(oenv.Err(), penv.Err(), ienv.Err()); err != nil {
		t.Fatal(err)
	}
	pcfg.Random = func() float64 {
		if failing.Load() {
			return 0.1 // < FailureRate: the gateway is down
		}
		return 0.9
	}
	public, admin := map[string]net.Listener{}, map[string]net.Listener{}
	for _, s := range []string{"order", "payment", "inventory"} {
		public[s], admin[s] = listen(), listen()
	}
	opts := func(s string) []app.Option {
		return []app.Option{app.WithoutSignals(), app.WithLogOutput(logs), app.WithListener(public[s]), app.WithAdminListener(admin[s])}
	}
	ocfg.AppOptions, pcfg.AppOptions, icfg.AppOptions = opts("order"), opts("payment"), opts("inventory")
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if t.Failed() {
			t.Logf("service logs:\n%s", logs.String())
		}
	})
	run := func(name string, f func() error) {
		wg.Go(func() {
			if err := f(); err != nil && ctx.Err() == nil {
				t.Errorf("%s service stopped: %v", name, err)
			}
		})
	}
	run("order", func() error { return ordersvc.Run(ctx, ocfg) })
	run("payment", func() error { return paymentsvc.Run(ctx, pcfg) })
	run("inventory", func() error { return inventorysvc.Run(ctx, icfg) })

	var metrics []string
	for _, s := range []string{"order", "payment", "inventory"} {
		base := "http://" + admin[s].Addr().String()
		waitHTTP(t, base+"/readyz", logs)
		metrics = append(metrics, s+"="+base+"/metrics")
	}
	return stack{orderURL: "http://" + public["order"].Addr().String(), dsn: testenv.PostgresDSN(t), brokers: brokers,
		metrics: strings.Join(metrics, ","), failing: failing, logs: logs}
}

func waitHTTP(t *testing.T, url string, logs *apptest.LogBuffer) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready: %v\n%s", url, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type order struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	TraceID   string `json:"trace_id"`
	JaegerURL string `json:"jaeger_url"`
	Stuck     bool   `json:"stuck"`
}

func place(t *testing.T, s stack, customer string, amount int) order {
	t.Helper()
	body := fmt.Sprintf(`{"customer_id":%q,"items":[{"sku":"sku-3","qty":1}],"amount":%d}`, customer, amount)
	resp, err := http.Post(s.orderURL+"/orders", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var o order
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("place order: HTTP %d, %v", resp.StatusCode, err)
	}
	return o
}

func getOrder(t *testing.T, s stack, id string) order {
	t.Helper()
	resp, err := http.Get(s.orderURL + "/orders/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var o order
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
		t.Fatal(err)
	}
	return o
}

// waitOrder polls the order until cond holds.
func waitOrder(t *testing.T, s stack, id string, within time.Duration, what string, cond func(order) bool) order {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		o := getOrder(t, s, id)
		if cond(o) {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %s: %s not reached within %s (state %s)", id, what, within, o.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// buildSagactl builds the sagactl binary of this checkout.
func buildSagactl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sagactl")
	build := exec.Command("go", "build", "-o", bin, "github.com/choreo-saga/choreo/cmd/sagactl")
	build.Dir = "../../.." // the choreo module
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sagactl: %v\n%s", err, out)
	}
	return bin
}

// trackerConfig is the reference saga's declaration the tracker and the console read.
const trackerConfig = "../../../deploy/tracker/order.json"

// startTracker runs `sagactl track` beside the stack, with a group of its own, into the
// stack's Postgres, and returns once it indexes.
func startTracker(t *testing.T, bin string, s stack) {
	t.Helper()
	line := startProcess(t, "sagactl track", bin, []string{"track", "-db", s.dsn, "-config", trackerConfig,
		"-group", "tracker-" + strings.ReplaceAll(testenv.Name(t, "b"), "_", "-"), "-refresh", "1s"}, s)
	if !strings.HasPrefix(line, "sagactl track: indexing ") {
		t.Fatalf("sagactl track said %q", line)
	}
}

// startConsole runs `sagactl console` against the stack and its saga tracker as a
// process of its own, and returns its base URL.
func startConsole(t *testing.T, bin string, s stack) string {
	t.Helper()
	l := startProcess(t, "sagactl console", bin, []string{"console", "-addr", "127.0.0.1:0", "-metrics", s.metrics, "-timeout", "20s",
		"-tracker-db", s.dsn, "-tracker-config", trackerConfig}, s)
	// "sagactl console: serving http://127.0.0.1:PORT/ (...)"
	_, rest, ok := strings.Cut(l, "serving ")
	u, _, _ := strings.Cut(rest, " ")
	if !ok || !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Fatalf("sagactl console said %q", l)
	}
	return strings.TrimSuffix(u, "/")
}

// startProcess runs bin with args against the stack (ORDER_URL, KAFKA_BROKERS), stops it
// with an interrupt when the test ends, and returns the first line it prints.
func startProcess(t *testing.T, name, bin string, args []string, s stack) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "ORDER_URL="+s.orderURL, "KAFKA_BROKERS="+s.brokers)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, stderr.String())
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case l := <-lines:
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start: %s", name, stderr.String())
	}
	return ""
}

// chromium returns the browser to drive: $CHROMIUM, or Debian's /usr/bin/chromium.
func chromium(t *testing.T) string {
	t.Helper()
	p := os.Getenv("CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no Chromium at %s (%v): run `make console-test`, which installs Debian's chromium, or set CHROMIUM", p, err)
	}
	return p
}

// browser starts headless Chromium with a fresh profile and the flags this machine
// needs (no sandbox as root, no QUIC, no background traffic).
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelB(); cancelA() })
	// The first run starts the browser, which lives as long as this context: no timeout.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s: %v", chromium(t), err)
	}
	return ctx
}

// step runs browser actions with a deadline.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		loc, _ := chromedp.Run(ctx, chromedp.Location())
		t.Fatalf("%s: %v (page %s)", what, err, loc)
	}
}

// get runs one browser action that returns a value, with a deadline.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	v, err := chromedp.Run(sctx, a)
	if err != nil {
		loc, _ := chromedp.Run(ctx, chromedp.Location())
		t.Fatalf("%s: %v (page %s)", what, err, loc)
	}
	return v
}

// screenshot writes the page to $CONSOLE_SCREENSHOTS/name when the variable is set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv(EnvScreenshots)
	if dir == "" {
		return
	}
	png := get(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", filepath.Join(dir, name), len(png))
}

// TestConsoleInChromium runs the demo saga, breaks the payment gateway until an order's
// order.created is dead-lettered, and then uses the console as an operator would: the
// overview lists the held (stuck) order, its page draws the timeline and links its
// trace, and the dead letter is replayed from the dead-letter page (dry run, then
// confirmation), after which the order is charged and CONFIRMED. Last, the held order is
// cancelled with its page's button.
func TestConsoleInChromium(t *testing.T) {
	ctx := browser(t)
	s := startStack(t)

	// The gateway is down: the payment group retries this order's order.created for
	// consumer.DefaultRetryMaxElapsed (a minute), then dead-letters it.
	s.failing.Store(true)
	broken := place(t, s, "c-7", 2500)
	held := place(t, s, "c-hang", 1200) // payment holds it on purpose: stuck
	bin := buildSagactl(t)
	startTracker(t, bin, s)
	base := startConsole(t, bin, s)

	waitDLQ := time.Now().Add(3 * time.Minute)
	var dead bool
	for !dead {
		dead = dlqHas(t, base, broken.ID)
		if !dead && time.Now().After(waitDLQ) {
			t.Fatalf("order %s's order.created was not dead-lettered", broken.ID)
		}
		if !dead {
			time.Sleep(time.Second)
		}
	}
	s.failing.Store(false) // the gateway is back
	// A few ordinary orders, so the overview has something in most states.
	var fine []order
	for i, c := range []string{"c-1", "c-2", "c-3", "c-poor"} {
		fine = append(fine, place(t, s, c, 1000+i))
	}
	for _, o := range fine {
		waitOrder(t, s, o.ID, time.Minute, "a terminal state", func(o order) bool { return o.State == "CONFIRMED" || o.State == "REJECTED" })
	}
	held = waitOrder(t, s, held.ID, time.Minute, "stuck", func(o order) bool { return o.Stuck })
	if getOrder(t, s, broken.ID).State != "PENDING" {
		t.Fatalf("the dead-lettered order moved on before the replay")
	}

	// Overview: the held order is listed as stuck, with its trace.
	type css = chromedp.CSS
	step(t, ctx, "overview",
		chromedp.EmulateViewport(1400, 1000),
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(css(`#stuck`)),
	)
	stuckText := get(t, ctx, "stuck orders", chromedp.Text(css(`#stuck tbody`)))
	if !strings.Contains(stuckText, held.ID) || !strings.Contains(stuckText, "PENDING") || !strings.Contains(stuckText, held.TraceID) {
		t.Fatalf("overview's stuck orders lack %s (trace %s):\n%s", held.ID, held.TraceID, stuckText)
	}
	dlqText := get(t, ctx, "dead letters", chromedp.Text(css(`#deadletters tbody`)))
	statesText := get(t, ctx, "states", chromedp.Text(css(`#states tbody`)))
	if !strings.Contains(dlqText, "orders.events.dlq") || !strings.Contains(statesText, "CONFIRMED") {
		t.Fatalf("overview: dead letters %q, states %q", dlqText, statesText)
	}
	// The live refresh replaces the tables from /api/overview.
	step(t, ctx, "live refresh", chromedp.WaitVisible(css(`#overview[data-refreshed]`)))
	stuckText = get(t, ctx, "stuck orders after refresh", chromedp.Text(css(`#stuck tbody`)))
	if !strings.Contains(stuckText, held.ID) {
		t.Fatalf("after the live refresh the stuck orders lack %s:\n%s", held.ID, stuckText)
	}
	screenshot(t, ctx, "console-overview.png")

	// The saga tracker's sections: the held order's saga is stuck on its charge, waiting
	// for payment (the observed producer of payment.*) to answer order.created.
	step(t, ctx, "stuck sagas", chromedp.WaitVisible(css(`#stuck-sagas a[href="/sagas/`+held.ID+`"]`)))
	stuckSagas := get(t, ctx, "stuck sagas", chromedp.Text(css(`#stuck-sagas tbody`)))
	if !strings.Contains(stuckSagas, `waiting for payment to answer order.created with payment.authorized|payment.declined (step "charge") since `) {
		t.Fatalf("overview's stuck sagas lack the held order's wait:\n%s", stuckSagas)
	}
	if counts := get(t, ctx, "saga counts", chromedp.Text(css(`#sagas tbody`))); !strings.Contains(counts, "order") {
		t.Fatalf("overview's saga counts: %q", counts)
	}
	step(t, ctx, "the stuck list",
		chromedp.Navigate(base+"/sagas/?status=stuck"),
		chromedp.WaitVisible(css(`#saga-list a[href="/sagas/`+held.ID+`"]`)),
	)
	list := get(t, ctx, "stuck list", chromedp.Text(css(`#saga-list tbody`)))
	if !strings.Contains(list, broken.ID) || strings.Contains(list, fine[0].ID) {
		t.Fatalf("the stuck list lacks the dead-lettered order %s or lists the settled %s:\n%s", broken.ID, fine[0].ID, list)
	}
	screenshot(t, ctx, "console-sagas.png")
	step(t, ctx, "the held order's saga page",
		chromedp.Click(css(`#saga-list a[href="/sagas/`+held.ID+`"]`)),
		chromedp.WaitVisible(css(`svg#saga-timeline circle`)),
		chromedp.WaitVisible(css(`#cancel-button`)),
	)
	lanes := get(t, ctx, "lanes", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("svg#saga-timeline .lane-name")).map(e => e.textContent)`))
	if strings.Join(lanes, ",") != "order,order service (history)" {
		t.Fatalf("the held order's lanes = %q; want its producer and the order service's history", lanes)
	}
	if w := get(t, ctx, "waiting", chromedp.Text(css(`#saga-status .waiting`))); !strings.Contains(w, "waiting for payment to answer order.created") {
		t.Fatalf("the held order's saga page says %q", w)
	}
	if events := get(t, ctx, "events", chromedp.Text(css(`#saga-events tbody`))); !strings.Contains(events, "order.created") || !strings.Contains(events, held.TraceID) {
		t.Fatalf("the held order's events lack order.created with trace %s:\n%s", held.TraceID, events)
	}
	screenshot(t, ctx, "console-saga.png")
	step(t, ctx, "the dead-lettered order's saga page",
		chromedp.Navigate(base+"/sagas/"+broken.ID),
		chromedp.WaitVisible(css(`#saga-replay-button`)),
	)
	deadText := get(t, ctx, "saga dead letters", chromedp.Text(css(`#saga-deadletters tbody`)))
	lanes = get(t, ctx, "lanes", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("svg#saga-timeline .lane-name")).map(e => e.textContent)`))
	if !strings.Contains(deadText, "orders.events.dlq") || !strings.Contains(deadText, "retries_exhausted") || !slices.Contains(lanes, "dead letters") {
		t.Fatalf("the dead-lettered order's saga page: dead letters %q, lanes %q", deadText, lanes)
	}

	// The observed flow: the tracker's graph drawn inline, its edges in a table.
	step(t, ctx, "flow page",
		chromedp.Navigate(base+"/flow/"),
		chromedp.WaitVisible(css(`#flow-svg svg g.node`)),
	)
	nodes := get(t, ctx, "flow nodes", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#flow-svg svg g.node text[font-weight=bold]")).map(e => e.textContent)`))
	if !slices.Contains(nodes, "order.created") || !slices.Contains(nodes, "order.confirmed") {
		t.Fatalf("the flow's boxes = %q; want the order saga's types", nodes)
	}
	if edges := get(t, ctx, "flow edges", chromedp.Text(css(`#flow-edges tbody`))); !strings.Contains(edges, "order.created") || !strings.Contains(edges, "payment") {
		t.Fatalf("the flow's edges:\n%s", edges)
	}
	screenshot(t, ctx, "console-flow.png")

	// The order page: the timeline SVG, the stuck flag, the deadline and the Jaeger link.
	step(t, ctx, "order page",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(css(`#stuck`)),
		chromedp.Click(css(`#stuck a[href="/orders/`+held.ID+`"]`)),
		chromedp.WaitVisible(css(`svg#timeline circle`)),
		chromedp.WaitVisible(css(`#stuck-flag`)),
		chromedp.WaitVisible(css(`#deadline`)),
		chromedp.WaitVisible(css(`#cancel-button`)),
	)
	if w := get(t, ctx, "order waiting", chromedp.Text(css(`#order-waiting`))); !strings.HasPrefix(w, "for payment to answer order.created") {
		t.Fatalf("the held order's page explains its wait as %q", w)
	}
	if a := get(t, ctx, "order amount", chromedp.Text(css(`#order-amount`))); a != "12.00" {
		t.Fatalf("the held order's amount reads %q; want 12.00 (1200 cents)", a)
	}
	href := get(t, ctx, "jaeger link", chromedp.AttributeValue(css(`#jaeger-link`), "href"))
	circles := get(t, ctx, "timeline steps", chromedp.Evaluate[int](`document.querySelectorAll("svg#timeline circle").length`))
	if href.Value != "http://localhost:16686/trace/"+held.TraceID || circles < 1 {
		t.Fatalf("order page: jaeger link %+v, %d timeline steps", href, circles)
	}
	screenshot(t, ctx, "console-order.png")

	// Dead letters: the broken order's record, its page, a dry run, then the replay.
	step(t, ctx, "dead letters",
		chromedp.Navigate(base+"/dlq?topic=orders.events.dlq"),
		chromedp.WaitVisible(css(`#dlq-records a[href="/orders/`+broken.ID+`"]`)),
	)
	screenshot(t, ctx, "console-deadletters.png")
	step(t, ctx, "open the record",
		chromedp.Click(chromedp.Search(`//tr[.//a[@href="/orders/`+broken.ID+`"]]//a[contains(@class,"record-link")]`)),
		chromedp.WaitVisible(css(`#replay-one-button`)),
	)
	if reason := get(t, ctx, "reason", chromedp.Text(css(`#record-reason`))); reason != "retries_exhausted" {
		t.Errorf("dead letter reason %q, want retries_exhausted", reason)
	}
	step(t, ctx, "dry run",
		chromedp.Click(css(`#replay-one-button`)),
		chromedp.WaitVisible(css(`#dry-run-note`)),
	)
	if o := getOrder(t, s, broken.ID); o.State != "PENDING" {
		t.Fatalf("the dry run moved the order to %s", o.State)
	}
	screenshot(t, ctx, "console-replay.png")
	step(t, ctx, "confirm the replay",
		chromedp.Click(css(`#replay-confirm-button`)),
		chromedp.WaitVisible(css(`#replayed-note`)),
	)
	if note := get(t, ctx, "replay result", chromedp.Text(css(`#replayed-note`))); !strings.Contains(note, "1 record(s)") {
		t.Fatalf("replay said %q", note)
	}
	// The order it belongs to moves on: payment charges it, inventory reserves, CONFIRMED.
	waitOrder(t, s, broken.ID, time.Minute, "CONFIRMED after the replay", func(o order) bool { return o.State == "CONFIRMED" })
	step(t, ctx, "the replayed order's page",
		chromedp.Navigate(base+"/orders/"+broken.ID),
		chromedp.WaitVisible(css(`svg#timeline`)),
	)
	if state := get(t, ctx, "order state", chromedp.Text(css(`#order-state`))); state != "CONFIRMED" {
		t.Fatalf("order page of %s says %s", broken.ID, state)
	}
	screenshot(t, ctx, "console-order-replayed.png")

	// The cancel button of the held order: a POST with the page's CSRF token.
	step(t, ctx, "cancel the held order",
		chromedp.Navigate(base+"/orders/"+held.ID),
		chromedp.Click(css(`#cancel-button`)),
		chromedp.WaitVisible(css(`#notice`)),
	)
	if note := get(t, ctx, "cancel notice", chromedp.Text(css(`#notice`))); !strings.Contains(note, "cancellation requested") {
		t.Fatalf("cancel said %q", note)
	}
	waitOrder(t, s, held.ID, time.Minute, "CANCELLED", func(o order) bool { return o.State == "CANCELLED" })

	// A payment.authorized without the amount its consumers require, produced onto the
	// reference topic, is listed on the Contracts page with the consumers it breaks.
	bad := "o-contract-" + strings.ReplaceAll(testenv.Name(t, "c"), "_", "-")
	produceWithoutAmount(t, s, bad)
	var violations string
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(violations, bad) {
		if time.Now().After(deadline) {
			t.Fatalf("the contracts page never listed %s:\n%s", bad, violations)
		}
		step(t, ctx, "contracts page", chromedp.Navigate(base+"/contracts/"), chromedp.WaitVisible(css(`#contract-violations`)))
		violations = get(t, ctx, "contract violations", chromedp.Text(css(`#contract-violations tbody`)))
	}
	for _, want := range []string{"payment.authorized", "v1", "inventory", "order", "accepts", "amount"} {
		if !strings.Contains(violations, want) {
			t.Errorf("the contracts page lacks %q:\n%s", want, violations)
		}
	}
	versions := get(t, ctx, "contract versions", chromedp.Text(css(`#contract-versions tbody`)))
	for _, want := range []string{"payment.authorized", "v2", "accepts, upcast", "no: payment still declares producing it"} {
		if !strings.Contains(versions, want) {
			t.Errorf("the contracts page's versions lack %q:\n%s", want, versions)
		}
	}
	screenshot(t, ctx, "console-contracts.png")
	step(t, ctx, "the violating saga's page",
		chromedp.Navigate(base+"/sagas/"+bad),
		chromedp.WaitVisible(css(`#saga-violations`)),
	)
}

// produceWithoutAmount produces onto payments.events a payment.authorized v1 of order id
// whose payload lacks the amount order and inventory require.
func produceWithoutAmount(t *testing.T, s stack, id string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(s.brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ev, err := event.New(events.SourcePayment, events.PaymentAuthorized, id,
		map[string]any{"order_id": id, "customer_id": "c-contract", "items": []events.Item{{SKU: "sku-1", Qty: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	ev.SchemaVersion = 1
	rec, err := event.ToRecord(events.TopicPayments, ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// dlqHas reports whether the console's dead-letter page lists a record keyed by id.
func dlqHas(t *testing.T, base, id string) bool {
	t.Helper()
	resp, err := http.Get(base + "/dlq?topic=orders.events.dlq")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && bytes.Contains(b, []byte(`href="/orders/`+id+`"`))
}
