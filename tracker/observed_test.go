package tracker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

// confirmedV1 is what order writes in an order.confirmed; paymentView what payment
// reads of it (it requires an amount order does not write).
type confirmedV1 struct {
	OrderID string `json:"order_id"`
}

type paymentView struct {
	OrderID string `json:"order_id"`
	Amount  int64  `json:"amount"`
}

// observedCatalogue declares order.confirmed v1: produced by order, consumed by payment
// (which requires amount) and by shipping (which reads order's type).
func observedCatalogue(t testing.TB, topic string) contract.Catalogue {
	t.Helper()
	var decls []contract.Declaration
	for _, d := range []func() (contract.Declaration, error){
		func() (contract.Declaration, error) {
			return contract.Declare[confirmedV1]("order", contract.Produces, topic, "order.confirmed", 1)
		},
		func() (contract.Declaration, error) {
			return contract.Declare[paymentView]("payment", contract.Consumes, topic, "order.confirmed", 1)
		},
		func() (contract.Declaration, error) {
			return contract.Declare[confirmedV1]("shipping", contract.Consumes, topic, "order.confirmed", 1)
		},
	} {
		decl, err := d()
		if err != nil {
			t.Fatal(err)
		}
		decls = append(decls, decl)
	}
	c, err := contract.NewCatalogue(decls...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestObservedViolations: an observed order.confirmed that payment's declared schema
// refuses is recorded as a violation of payment (as consumer), with its source, type and
// version, on its saga's timeline and in the metric, once however often it is
// redelivered; it does not change the saga's status; a payload every schema accepts and
// an undeclared version are not violations.
func TestObservedViolations(t *testing.T) {
	ctx := context.Background()
	db := testenv.Postgres(t)
	const topic = "orders.events"
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	tr, err := tracker.New(db, sagaConfig(topic), tracker.WithContracts(observedCatalogue(t, topic)),
		tracker.WithMeter(mp.Meter("test")))
	if err != nil {
		t.Fatal(err)
	}
	if err := tracker.Migrate(ctx, db, ""); err != nil {
		t.Fatal(err)
	}
	offset := int64(0)
	record := func(corr, typ string, version int, data any) *kgo.Record {
		t.Helper()
		ev, err := event.New("order", typ, corr, data)
		if err != nil {
			t.Fatal(err)
		}
		ev.SchemaVersion = version
		r, err := event.ToRecord(topic, ev)
		if err != nil {
			t.Fatal(err)
		}
		r.Offset, offset = offset, offset+1
		return r
	}
	created := record("o-1", "order.created", 1, confirmedV1{OrderID: "o-1"})
	bad := record("o-1", "order.confirmed", 1, confirmedV1{OrderID: "o-1"})
	recs := []*kgo.Record{
		created,
		bad,
		record("o-2", "order.confirmed", 1, paymentView{OrderID: "o-2", Amount: 5}),
		record("o-3", "order.confirmed", 2, map[string]int{"x": 1}),
	}
	for range 2 { // redelivered: counted once
		if _, err := tr.Ingest(ctx, recs...); err != nil {
			t.Fatal(err)
		}
	}
	got, err := tr.ObservedViolations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("violations %+v; want one: order's order.confirmed v1 against payment", got)
	}
	v := got[0]
	if v.Source != "order" || v.Type != "order.confirmed" || v.Version != 1 || v.Service != "payment" ||
		v.Role != contract.Consumes || v.Count != 1 || v.Latest.Offset != bad.Offset ||
		v.Latest.CorrelationID != "o-1" || !strings.Contains(v.Latest.Detail, "amount") {
		t.Fatalf("violation %+v", v)
	}
	tl, err := tr.Saga(ctx, "o-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Violations) != 1 || tl.Violations[0].Service != "payment" {
		t.Fatalf("timeline violations %+v", tl.Violations)
	}
	for _, s := range tl.Sagas {
		if s.Saga == "order" && s.Status != tracker.StatusCompleted {
			t.Fatalf("order saga %s; a violation must not change its status", s.Status)
		}
	}
	m, ok := collect(t, reader)["choreo.tracker.contract.violations"]
	if !ok {
		t.Fatal("no choreo.tracker.contract.violations metric")
	}
	sum := m.Data.(metricdata.Sum[int64])
	if len(sum.DataPoints) != 1 || sum.DataPoints[0].Value != 1 {
		t.Fatalf("metric %+v; want one point of 1", sum.DataPoints)
	}
	for _, kv := range [][2]string{{"source", "order"}, {"type", "order.confirmed"}, {"version", "1"}, {"consumer", "payment"}} {
		if val, ok := sum.DataPoints[0].Attributes.Value(attribute.Key(kv[0])); !ok || val.AsString() != kv[1] {
			t.Errorf("metric label %s = %q, want %q", kv[0], val.AsString(), kv[1])
		}
	}
}

func TestWithContractsValidates(t *testing.T) {
	db := testenv.Postgres(t)
	_, err := tracker.New(db, sagaConfig("t"), tracker.WithContracts(contract.Catalogue{}))
	if !errors.Is(err, tracker.ErrInvalidConfig) {
		t.Fatalf("New with an empty catalogue: %v; want ErrInvalidConfig", err)
	}
}
