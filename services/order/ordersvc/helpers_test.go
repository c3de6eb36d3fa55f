package ordersvc_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
	"github.com/choreo-saga/choreo/tracing"
)

func TestMain(m *testing.M) {
	// outbox.Enqueue injects trace context with the global propagator, as in a service
	// after tracing.Setup.
	otel.SetTextMapPropagator(tracing.NewPropagator())
	os.Exit(m.Run())
}

type fixture struct {
	svc    *ordersvc.Service
	pool   *pgxpool.Pool
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	srv    *httptest.Server
}

// newFixture returns the order domain on a fresh, migrated database, with an in-memory
// span recorder and metric reader, and its HTTP API on a test server.
// opts are added after the fixture's own options.
func newFixture(t *testing.T, cfg ordersvc.Settings, opts ...ordersvc.Option) *fixture {
	t.Helper()
	pool := testenv.Postgres(t)
	if err := ordersvc.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(tracing.CorrelationProcessor()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	if cfg.JaegerUIURL == "" {
		cfg.JaegerUIURL = "http://jaeger.test:16686/"
	}
	svc, err := ordersvc.New(pool, cfg, append([]ordersvc.Option{ordersvc.WithTracerProvider(tp), ordersvc.WithMeterProvider(mp),
		ordersvc.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	return &fixture{svc: svc, pool: pool, spans: rec, reader: reader, srv: srv}
}

// newRequest builds a request with body (Content-Type application/json when not empty)
// and header, where an empty value removes that header.
func newRequest(t testing.TB, method, url, body string, header map[string]string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	return req
}

// do sends a request to the API and decodes a JSON response into out (if not nil).
func (f *fixture) do(t *testing.T, method, path string, body string, header map[string]string, out any) *http.Response {
	t.Helper()
	resp, err := f.srv.Client().Do(newRequest(t, method, f.srv.URL+path, body, header))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	return resp
}

const validBody = `{"customer_id":"c-1","items":[{"sku":"sku-1","qty":2}],"amount":4200}`

// create places a valid order through the API and returns it.
func (f *fixture) create(t *testing.T) ordersvc.OrderJSON {
	t.Helper()
	var o ordersvc.OrderJSON
	if resp := f.do(t, "POST", "/orders", validBody, nil, &o); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: status %d", resp.StatusCode)
	}
	return o
}

// get returns an order with its history through the API.
func (f *fixture) get(t *testing.T, id string) ordersvc.OrderJSON {
	t.Helper()
	var o ordersvc.OrderJSON
	if resp := f.do(t, "GET", "/orders/"+id, "", nil, &o); resp.StatusCode != http.StatusOK {
		t.Fatalf("get %s: status %d", id, resp.StatusCode)
	}
	return o
}

// deliver hands an event about orderID to the consumer's business handler in its own
// transaction, as consumer.Idempotent does, and returns the event.
func (f *fixture) deliver(t *testing.T, orderID, typ string) (event.Event, error) {
	t.Helper()
	// validBody's order, as payment charges it.
	var data any = events.PaymentV1{OrderID: orderID, CustomerID: "c-1", Amount: 4200, Reason: "test",
		Items: []events.Item{{SKU: "sku-1", Qty: 2}}}
	source := events.SourcePayment
	if typ == events.StockReserved || typ == events.StockUnavailable || typ == events.StockReleased {
		data, source = events.StockV1{OrderID: orderID, Items: []events.Item{{SKU: "sku-1", Qty: 2}}}, events.SourceInventory
	}
	ev := apptest.NewEvent(t, source, typ, orderID, data)
	ctx := tracing.WithCorrelationID(context.Background(), orderID)
	return ev, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error { return f.svc.HandleEvent(ctx, tx, ev) })
}

// mustDeliver is deliver that fails the test on error.
func (f *fixture) mustDeliver(t *testing.T, orderID, typ string) event.Event {
	t.Helper()
	ev, err := f.deliver(t, orderID, typ)
	if err != nil {
		t.Fatalf("deliver %s: %v", typ, err)
	}
	return ev
}

type outboxRow struct {
	Topic, Key, Type, CorrelationID, CausationID, TraceParent string
	Payload                                                   map[string]any
}

// outbox returns the rows waiting in the outbox, oldest first.
func (f *fixture) outbox(t *testing.T) []outboxRow {
	t.Helper()
	var out []outboxRow
	for _, rec := range apptest.OutboxRecords(t, f.pool, "") {
		r := outboxRow{Topic: rec.Topic, Key: string(rec.Key)}
		for _, h := range rec.Headers {
			switch h.Key {
			case event.HeaderType:
				r.Type = string(h.Value)
			case event.HeaderCorrelationID:
				r.CorrelationID = string(h.Value)
			case event.HeaderCausationID:
				r.CausationID = string(h.Value)
			case "traceparent":
				r.TraceParent = string(h.Value)
			}
		}
		if err := json.Unmarshal(rec.Value, &r.Payload); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// typesFor returns the event types waiting in the outbox for one order.
func (f *fixture) typesFor(t *testing.T, orderID string) []string {
	t.Helper()
	var types []string
	for _, r := range f.outbox(t) {
		if r.Key == orderID {
			types = append(types, r.Type)
		}
	}
	return types
}

// exec runs SQL on the test database (used to move clocks: state_since, deadline_at).
func (f *fixture) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := f.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}
