package tracing_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/tracing"
)

// TestOneSagaOneTrace drives two saga steps through the real pieces:
//
//	HTTP POST /orders → tx: INSERT order + outbox.Enqueue(order.created) → relay send
//	→ payment consumer (Standard chain) → tx: INSERT payment + Enqueue(payment.authorized)
//	→ relay send → order consumer (Standard chain) → tx: UPDATE order
//
// against real Postgres and a Kafka-protocol broker, and checks that every
// span lands in one trace whose spans form one unbroken tree rooted at the
// HTTP span, that every span carries the saga's correlation id and entity,
// that the messaging spans follow the OTel conventions, and that the log
// lines of the consumers name the same trace.
func TestOneSagaOneTrace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(tracing.CorrelationProcessor()),
		sdktrace.WithSpanProcessor(rec),
	)
	defer tp.Shutdown(context.Background())
	var logs apptest.LogBuffer
	logger := slog.New(tracing.NewLogHandler(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))

	// Postgres: the pool is instrumented; the relay and the consumers share it.
	pool, err := newPool(t, tracing.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, m := range []func(context.Context) error{
		func(ctx context.Context) error { return migrate.Up(ctx, pool) },
		func(ctx context.Context) error {
			_, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL);
				CREATE TABLE payments (order_id text PRIMARY KEY)`)
			return err
		},
	} {
		if err := m(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Kafka.
	brokers, ordersTopic := kafkaTopic(t)
	paymentsTopic := testenv.Topic(t, brokers, 1)
	producer := kafkaClient(t, brokers)

	ob, err := outbox.New()
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(pool, producer, ob, outbox.WithTracerProvider(tp),
		outbox.WithEntityAttribute("order.id"), outbox.WithPollInterval(50*time.Millisecond), outbox.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	run := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	run("relay", relay.Run)

	// Step 2: payment reacts to order.created.
	pay := consumer.NewRouter().Handle("order.created", func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if _, err := tx.Exec(ctx, "INSERT INTO payments (order_id) VALUES ($1)", ev.Subject); err != nil {
			return err
		}
		out, err := event.New("payment", "payment.authorized", ev.Subject, map[string]int{"amount": 1250})
		if err != nil {
			return err
		}
		return ob.Enqueue(ctx, tx, paymentsTopic, out.CausedBy(ev))
	})
	// Step 3: order reacts to payment.authorized.
	ord := consumer.NewRouter().Handle("payment.authorized", func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		_, err := tx.Exec(ctx, "UPDATE orders SET status = 'PAID' WHERE id = $1", ev.Subject)
		return err
	})
	for _, c := range []struct {
		group, topic string
		router       *consumer.Router
	}{{"payment", ordersTopic, pay}, {"order", paymentsTopic, ord}} {
		h, err := consumer.Standard(consumer.StandardConfig{
			DB: pool, Router: c.router, DeadLetter: producer, Name: c.group,
			EntityAttribute: "order.id", TracerProvider: tp, Logger: logger,
			AfterCommit: []func(){ob.Wake},
		})
		if err != nil {
			t.Fatal(err)
		}
		cons, err := consumer.New(brokers, c.group, []string{c.topic}, h, consumer.WithLogger(logger))
		if err != nil {
			t.Fatal(err)
		}
		run("consumer "+c.group, cons.Run)
	}

	// Step 1: the HTTP request that starts the saga.
	const orderID = "o-48271"
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := tracing.WithEntity(tracing.WithCorrelationID(r.Context(), orderID), "order.id", orderID)
		tracing.AnnotateSpan(ctx) // the server span started before the id was known
		err := ob.InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO orders (id, status) VALUES ($1, 'PENDING')", orderID); err != nil {
				return err
			}
			ev, err := event.New("order", "order.created", orderID, map[string]int{"qty": 1})
			if err != nil {
				return err
			}
			return ob.Enqueue(ctx, tx, ordersTopic, ev)
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	srv := httptest.NewServer(otelhttp.NewHandler(create, "POST /orders",
		otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(tracing.NewPropagator()),
		otelhttp.WithSpanNameFormatter(func(op string, _ *http.Request) string { return op })))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/orders", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /orders: %s", resp.Status)
	}

	// The last step's process span ends after everything inside it.
	lastProcess := "process " + paymentsTopic
	testenv.Eventually(t, testenv.Timeout, "the last process span to end", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == lastProcess {
				return true
			}
		}
		return false
	})
	var status string
	if err := pool.QueryRow(ctx, "SELECT status FROM orders WHERE id = $1", orderID).Scan(&status); err != nil || status != "PAID" {
		t.Fatalf("order status = %q (%v), want PAID", status, err)
	}
	cancel()
	wg.Wait()

	spans := rec.Ended()
	byID := make(map[trace.SpanID]sdktrace.ReadOnlySpan, len(spans))
	var root sdktrace.ReadOnlySpan
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
		if s.Name() == "POST /orders" {
			root = s
		}
	}
	if root == nil || root.Parent().IsValid() {
		t.Fatalf("no root HTTP span among %d spans", len(spans))
	}
	traceID := root.SpanContext().TraceID()

	// One trace, one tree: every span is in the root's trace, and every span
	// but the root has its parent among the recorded spans.
	for _, s := range spans {
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("span %q is in trace %s, want %s", s.Name(), s.SpanContext().TraceID(), traceID)
		}
		if s != root {
			if _, ok := byID[s.Parent().SpanID()]; !ok {
				t.Errorf("span %q has a parent %s that was not recorded: the chain is broken", s.Name(), s.Parent().SpanID())
			}
		}
		a := attrs(s)
		if a[tracing.AttrCorrelationID] != orderID || a["order.id"] != orderID {
			t.Errorf("span %q: %s=%q order.id=%q, want %s", s.Name(), tracing.AttrCorrelationID, a[tracing.AttrCorrelationID], a["order.id"], orderID)
		}
	}

	// The hops, in order: each is a descendant of the previous one.
	hops := []string{"POST /orders", "send " + ordersTopic, "process " + ordersTopic, "send " + paymentsTopic, "process " + paymentsTopic}
	for i := 1; i < len(hops); i++ {
		child, parent := spanNamed(t, rec, hops[i]), spanNamed(t, rec, hops[i-1])
		if !descends(byID, child, parent) {
			t.Errorf("%q does not descend from %q", hops[i], hops[i-1])
		}
	}
	// A consumer span is the direct child of the producer span whose record
	// it processes.
	for _, topic := range []string{ordersTopic, paymentsTopic} {
		if spanNamed(t, rec, "process "+topic).Parent().SpanID() != spanNamed(t, rec, "send "+topic).SpanContext().SpanID() {
			t.Errorf("process %s is not the child of send %s", topic, topic)
		}
	}

	// Messaging semantic conventions on the broker hops.
	for _, h := range []struct {
		span  string
		topic string
		group string
	}{
		{"send " + ordersTopic, ordersTopic, ""}, {"process " + ordersTopic, ordersTopic, "payment"},
		{"send " + paymentsTopic, paymentsTopic, ""}, {"process " + paymentsTopic, paymentsTopic, "order"},
	} {
		a := attrs(spanNamed(t, rec, h.span))
		want := map[string]string{
			"messaging.system": "kafka", "messaging.destination.name": h.topic,
			"messaging.destination.partition.id": "0", "messaging.kafka.offset": "0",
			"messaging.kafka.message.key": orderID,
		}
		if h.group != "" {
			want["messaging.operation.type"] = "process"
			want["messaging.consumer.group.name"] = h.group
		} else {
			want["messaging.operation.type"] = "send"
		}
		for k, v := range want {
			if a[k] != v {
				t.Errorf("%s: %s = %q, want %q", h.span, k, a[k], v)
			}
		}
		if a["messaging.message.id"] == "" {
			t.Errorf("%s: no messaging.message.id", h.span)
		}
	}
	// Postgres client spans exist inside both consumers' handling.
	for _, topic := range []string{ordersTopic, paymentsTopic} {
		process := spanNamed(t, rec, "process "+topic)
		n := 0
		for _, s := range spans {
			if s.SpanKind() == trace.SpanKindClient && attrs(s)["db.system.name"] == "postgresql" && descends(byID, s, process) {
				n++
			}
		}
		if n == 0 {
			t.Errorf("no Postgres client spans under %q", process.Name())
		}
	}

	// The consumers' log lines name the trace and the saga.
	found := 0
	for _, l := range logs.Records() {
		if l["trace_id"] == traceID.String() && l["correlation_id"] == orderID && l["order.id"] == orderID {
			found++
		}
	}
	if found < 2 {
		t.Errorf("%d log lines carry trace %s and correlation id %s, want one per consumed record", found, traceID, orderID)
	}
}

// descends reports whether s is a (transitive) child of ancestor.
func descends(byID map[trace.SpanID]sdktrace.ReadOnlySpan, s, ancestor sdktrace.ReadOnlySpan) bool {
	for p := s.Parent(); p.IsValid(); {
		if p.SpanID() == ancestor.SpanContext().SpanID() {
			return true
		}
		next, ok := byID[p.SpanID()]
		if !ok {
			return false
		}
		p = next.Parent()
	}
	return false
}
