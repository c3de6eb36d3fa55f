package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/asyncapi"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

// TestConsoleTrackerPages runs the saga tracker with the declarations of deploy/tracker
// (topics renamed) over an order saga stuck behind payment.authorized, whose event the
// inventory group dead-lettered, a stuck shipping saga and a completed one, and reads
// them through the console: the overview's counts and stuck sagas, the sagas list, and
// each saga's page with its lanes, dead letters, replay, the trace's waterfall and,
// where the order API knows the id, the order's own lane and Cancel.
func TestConsoleTrackerPages(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := testenv.Postgres(t)
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	dlq := topic + consumer.DeadLetterSuffix
	retry := consumer.RetryTopic(topic, "inventory")
	for _, name := range []string{dlq, retry} {
		if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, name); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}

	cfg, err := loadTrackConfigs("../../deploy/tracker/order.json,../../deploy/tracker/shipping.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Topics = []string{topic}

	// Five minutes ago, so every 30 s window has passed. o-1 is the order the fake
	// order API knows; s-1 and s-2 are shipping sagas it does not.
	base := time.Now().Add(-5 * time.Minute).UTC()
	var prev event.Event
	produce := func(source, typ, corr string, at time.Duration, causedByPrev bool) *kgo.Record {
		e, err := event.New(source, typ, corr, map[string]string{"id": corr})
		if err != nil {
			t.Fatal(err)
		}
		if causedByPrev {
			e = e.CausedBy(prev)
		}
		e.Time = base.Add(at)
		prev = e
		r, err := event.ToRecord(topic, e)
		if err != nil {
			t.Fatal(err)
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")})
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	produce("order", "order.created", "o-1", 0, false)
	paid := produce("payment", "payment.authorized", "o-1", time.Second, true)
	produce("order", "order.confirmed", "s-1", 2*time.Second, false)
	produce("order", "order.confirmed", "s-2", 3*time.Second, false)
	produce("shipping", "shipment.scheduled", "s-2", 4*time.Second, true)
	// The inventory group's handler fails on payment.authorized: the library's DeadLetter
	// middleware writes it to the dead-letter topic, with markup in its error.
	fail := consumer.DeadLetter(cl)(func(context.Context, *consumer.Message) error {
		return consumer.Permanent(errors.New(`<script>alert("dlq")</script>`))
	})
	if err := fail(ctx, &consumer.Message{Record: paid, Group: "inventory", Attempt: 1}); err != nil {
		t.Fatal(err)
	}

	tr, err := tracker.New(db, cfg, tracker.WithGroup(testenv.Name(t, "tracker")), tracker.WithRefresh(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close() //nolint:errcheck
	if err := tracker.Migrate(ctx, db, ""); err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- tr.Run(ctx, brokers) }()
	testenv.Eventually(t, testenv.Timeout, "every saga and the dead letter indexed", func() bool {
		all, err := tr.List(ctx, "")
		return err == nil && len(all) == 3 && all[0].CorrelationID == "o-1" && all[0].DeadLetters == 1
	})

	var cancels atomic.Int32
	api := fakeOrderAPI(t, &cancels)
	c := conn{orderURL: api.URL, brokers: strings.Join(brokers, ","), timeout: 10 * time.Second, kafkaSec: kafkaSecFlags{}}
	srv, err := newConsole(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.close)
	// The console's own tracker, on the same index, as sagactl console -tracker-db makes it.
	if srv.tr, err = tracker.New(db, cfg); err != nil {
		t.Fatal(err)
	}
	defer srv.tr.Close() //nolint:errcheck
	// Jaeger's query API with the recorded trace under the id the events' traceparent carries.
	traceBody, _ := loadJaegerFixture(t)
	if srv.jaeger, err = newJaegerClient(fakeJaeger(t, "4bf92f3577b34da6a3ce929d0e0e4736", traceBody).URL, "", c.timeout); err != nil {
		t.Fatal(err)
	}
	h := srv.handler()

	// Overview: counts per kind, the stuck sagas with what they wait for, oldest first.
	rec := consoleGet(t, h, "/api/overview")
	var ov overview
	if err := json.Unmarshal(rec.Body.Bytes(), &ov); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("overview: %d %v %s", rec.Code, err, rec.Body)
	}
	wantCounts := []sagaCount{
		{Saga: "order", Stuck: 1, Since: tsString(base)},
		// o-1's order saga does not start a shipping saga; s-1 and s-2 do.
		{Saga: "shipping", Stuck: 1, Completed: 1, Since: tsString(base.Add(2 * time.Second))},
	}
	if !ov.Tracker || ov.SagasError != "" || len(ov.Sagas) != 2 || ov.Sagas[0] != wantCounts[0] || ov.Sagas[1] != wantCounts[1] {
		t.Fatalf("overview sagas = %+v (%s); want %+v", ov.Sagas, ov.SagasError, wantCounts)
	}
	if len(ov.StuckSagas) != 2 || ov.StuckSagas[0].ID != "o-1" || ov.StuckSagas[1].ID != "s-1" ||
		!strings.HasPrefix(ov.StuckSagas[0].Waiting, `waiting for inventory to answer payment.authorized with stock.* (step "reserve stock") since `) ||
		!strings.HasPrefix(ov.StuckSagas[1].Waiting, `waiting for shipping to answer order.confirmed with shipment.scheduled (step "schedule shipment")`) {
		t.Fatalf("overview stuck sagas = %+v", ov.StuckSagas)
	}
	if ov.StatesSince != "2026-01-02 03:04:05.000Z" {
		t.Errorf("states since %q; want the oldest order's creation", ov.StatesSince)
	}
	page := consoleGet(t, h, "/").Body.String()
	for _, want := range []string{`id="stuck-sagas"`, `href="/sagas/o-1"`, `id="nav-sagas"`, "created since 2026-01-02 03:04:05.000Z"} {
		if !strings.Contains(page, want) {
			t.Errorf("overview page lacks %s", want)
		}
	}

	// The observed flow: the SVG inline, the edges, the downloads.
	fp := consoleGet(t, h, "/flow/")
	if body := fp.Body.String(); fp.Code != http.StatusOK || !strings.Contains(body, `<svg xmlns="http://www.w3.org/2000/svg"`) ||
		!strings.Contains(body, "shipping ×1") || !strings.Contains(body, `<td>order.created</td><td>payment.authorized</td><td>payment</td>`) ||
		!strings.Contains(body, `id="nav-flow"`) {
		t.Fatalf("flow page: %d\n%s", fp.Code, body)
	}
	if f := consoleGet(t, h, "/flow/flow.svg"); f.Code != http.StatusOK || f.Header().Get("Content-Type") != "image/svg+xml" ||
		!strings.HasPrefix(f.Body.String(), "<svg") {
		t.Errorf("flow.svg: %d %s", f.Code, f.Header().Get("Content-Type"))
	}
	if f := consoleGet(t, h, "/flow/asyncapi.json"); f.Code != http.StatusOK || asyncapi.Validate(f.Body.Bytes()) != nil {
		t.Errorf("asyncapi.json: %d %v", f.Code, asyncapi.Validate(f.Body.Bytes()))
	}
	if f := consoleGet(t, h, "/flow/other"); f.Code != http.StatusNotFound {
		t.Errorf("/flow/other: %d, want 404", f.Code)
	}

	// The sagas list, filtered.
	list := consoleGet(t, h, "/sagas/?saga=shipping&status=stuck")
	if body := list.Body.String(); list.Code != http.StatusOK || !strings.Contains(body, `href="/sagas/s-1"`) || strings.Contains(body, `href="/sagas/s-2"`) {
		t.Fatalf("sagas list (shipping, stuck): %d\n%s", list.Code, body)
	}

	// The order saga's page: lanes per service, the dead letters' lane and the order
	// service's history lane; the dead letter (escaped) with replay; Cancel.
	sp := consoleGet(t, h, "/sagas/o-1")
	body := sp.Body.String()
	if sp.Code != http.StatusOK {
		t.Fatalf("saga page o-1: %d\n%s", sp.Code, body)
	}
	for _, want := range []string{
		`data-lane="order"`, `data-lane="payment"`, `data-lane="dead letters"`, `data-lane="order service (history)"`,
		`waiting for inventory to answer payment.authorized`, "4bf92f3577b34da6a3ce929d0e0e4736",
		`name="rec" value="` + dlq + `|0:0"`, `action="/dlq/replay"`, `id="cancel-button"`,
		"for payment to answer order.created", "&lt;script&gt;alert(&#34;dlq&#34;)&lt;/script&gt;",
		`class="cause"`,                                                          // payment.authorized was caused by order.created
		`id="trace-waterfall"`, `data-service="order"`, `data-service="payment"`, // the trace, read from Jaeger
	} {
		if !strings.Contains(body, want) {
			t.Errorf("saga page o-1 lacks %s", want)
		}
	}
	if strings.Contains(body, `<script>alert`) {
		t.Error("saga page o-1 carries the dead letter's markup unescaped")
	}
	// Its replay form works through the console's replay path: a dry run lists the record.
	var cookie *http.Cookie
	for _, ck := range sp.Result().Cookies() {
		if ck.Name == csrfCookie {
			cookie = ck
		}
	}
	dry := consolePost(t, h, "/dlq/replay", url.Values{"csrf": formValues(body, "csrf")[:1],
		"rec": formValues(body, "rec"), "mode": {"preview"}}, cookie)
	if refs := formValues(dry.Body.String(), "rec"); dry.Code != http.StatusOK || len(refs) != 1 || refs[0] != dlq+"|0:0" {
		t.Fatalf("dry run from the saga page: %d, refs %v\n%s", dry.Code, refs, dry.Body)
	}

	// The shipping saga's page: its own lane, no order lane, no Cancel.
	sp = consoleGet(t, h, "/sagas/s-1")
	body = sp.Body.String()
	if sp.Code != http.StatusOK || !strings.Contains(body, "waiting for shipping to answer order.confirmed") ||
		!strings.Contains(body, `data-lane="order"`) || strings.Contains(body, "order service (history)") ||
		strings.Contains(body, `id="cancel-button"`) {
		t.Fatalf("saga page s-1: %d\n%s", sp.Code, body)
	}
	if rec := consoleGet(t, h, "/sagas/nobody"); rec.Code != http.StatusNotFound {
		t.Errorf("unknown saga: status %d", rec.Code)
	}

	// The order page explains the wait as sagactl order does, in currency, and links the tracker.
	op := consoleGet(t, h, "/orders/o-1").Body.String()
	if !strings.Contains(op, `<span id="order-waiting">for payment to answer order.created`) ||
		!strings.Contains(op, `<span id="order-amount">0.00</span>`) || !strings.Contains(op, `href="/sagas/o-1"`) {
		t.Errorf("order page lacks the wait, the amount in currency or the tracker link:\n%s", op)
	}

	// Without a tracker the console has no saga pages and no Sagas link.
	plain := newTestConsole(t, api.URL)
	if rec := consoleGet(t, plain, "/sagas/o-1"); rec.Code != http.StatusNotFound {
		t.Errorf("saga page without a tracker: status %d", rec.Code)
	}
	if strings.Contains(consoleGet(t, plain, "/").Body.String(), "nav-sagas") {
		t.Error("overview without a tracker links the sagas page")
	}

	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("tracker Run = %v", err)
	}
}

// TestConsoleTrackerFlags: the tracker's declarations without its database, or its
// database without declarations, is a usage error, not a console without the tracker.
func TestConsoleTrackerFlags(t *testing.T) {
	for _, args := range [][]string{
		{"console", "-addr", "127.0.0.1:0", "-tracker-config", "../../deploy/tracker/order.json"},
		{"console", "-addr", "127.0.0.1:0", "-tracker-db", "postgres://127.0.0.1:1/x"},
	} {
		var out, errb strings.Builder
		if code := run(context.Background(), args, stdio{out: &out, err: &errb, getenv: func(string) string { return "" }}); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (usage): %s%s", args, code, exitUsage, out.String(), errb.String())
		}
	}
}
