package tracker_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// sagaConfig is the reference saga's declaration plus the shipping saga's, on one topic.
func sagaConfig(topic string) tracker.Config {
	return tracker.Config{
		Topics: []string{topic},
		Sagas: []tracker.Saga{
			{
				Name:     "order",
				Start:    []string{"order.created"},
				Terminal: []string{"order.confirmed", "order.rejected", "order.cancelled"},
				Steps: []tracker.Step{
					{Name: "authorize payment", After: "order.created", Expect: []string{"payment.*"}, Within: tracker.Duration(30 * time.Second), Service: "payment"},
					{Name: "reserve stock", After: "payment.authorized", Expect: []string{"stock.*"}, Within: tracker.Duration(30 * time.Second), Service: "stock-declared"},
				},
			},
			{
				Name:     "shipping",
				Start:    []string{"order.confirmed"},
				Terminal: []string{"shipment.scheduled"},
				Steps: []tracker.Step{
					{After: "order.confirmed", Expect: []string{"shipment.scheduled"}, Within: tracker.Duration(time.Minute), Service: "shipping"},
				},
			},
		},
	}
}

// chain builds a saga's events, each caused by the previous, one second apart.
func chain(t *testing.T, corr string, steps ...[2]string) []event.Event {
	t.Helper()
	var out []event.Event
	for i, s := range steps {
		e, err := event.New(s[0], s[1], corr, map[string]int{"step": i})
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			e = e.CausedBy(out[i-1])
		}
		e.Time = t0.Add(time.Duration(i) * time.Second)
		out = append(out, e)
	}
	return out
}

func records(t *testing.T, topic string, evs []event.Event) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for _, e := range evs {
		r, err := event.ToRecord(topic, e)
		if err != nil {
			t.Fatal(err)
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")})
		out = append(out, r)
	}
	return out
}

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func TestTrackerStuckCompletedAndDeadLetters(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := testenv.Postgres(t)
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 2)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic+tracker.DLQSuffix); err != nil || resp.Err != nil {
		t.Fatalf("create dlq topic: %v %v", err, resp.Err)
	}

	done := chain(t, "order-done",
		[2]string{"order", "order.created"}, [2]string{"payment", "payment.authorized"},
		[2]string{"inventory", "stock.reserved"}, [2]string{"order", "order.confirmed"})
	stuck := chain(t, "order-stuck",
		[2]string{"order", "order.created"}, [2]string{"payment", "payment.authorized"})
	recs := append(records(t, topic, done), records(t, topic, stuck)...)
	// A dead letter of the stuck saga: the original headers plus the DLQ headers.
	dl := records(t, topic+tracker.DLQSuffix, stuck[1:])[0]
	dl.Headers = append(dl.Headers,
		kgo.RecordHeader{Key: consumer.HeaderDLQReason, Value: []byte("handler")},
		kgo.RecordHeader{Key: consumer.HeaderDLQError, Value: []byte("inventory: boom")})
	// A record that is no event: skipped, not indexed.
	junk := &kgo.Record{Topic: topic, Key: []byte("x"), Value: []byte("not an event")}
	if err := cl.ProduceSync(ctx, append(recs, dl, junk)...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var now atomic.Int64
	now.Store(t0.Add(5 * time.Second).UnixNano())
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	tr, err := tracker.New(db, sagaConfig(topic),
		tracker.WithGroup(testenv.Name(t, "tracker")),
		tracker.WithNow(func() time.Time { return time.Unix(0, now.Load()).UTC() }),
		tracker.WithRetention(time.Hour), tracker.WithRetentionBatch(4),
		tracker.WithRefresh(200*time.Millisecond),
		tracker.WithMeter(mp.Meter("test")))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close() }()
	if err := tracker.Migrate(ctx, db, ""); err != nil {
		t.Fatal(err)
	}
	if err := tracker.Migrate(ctx, db, ""); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- tr.Run(ctx, brokers) }()

	count := func() int {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM `+tracker.DefaultTable).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	want := len(recs) + 1
	// Summaries follow each indexed batch: wait for the last one, the dead letter's.
	testenv.Eventually(t, testenv.Timeout, "every event and the dead letter indexed and summarized", func() bool {
		all, err := tr.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		return count() == want && len(all) == 3 && slices.ContainsFunc(all, func(s tracker.Summary) bool {
			return s.CorrelationID == "order-stuck" && s.DeadLetters == 1
		})
	})

	// Within every window: nothing is stuck yet.
	if s, err := tr.Stuck(ctx); err != nil || len(s) != 0 {
		t.Fatalf("Stuck before any window closed = %+v, %v; want none", s, err)
	}
	if s, err := tr.List(ctx, tracker.StatusInFlight); err != nil || len(s) != 2 {
		t.Fatalf("in flight = %+v, %v; want the stuck order and the shipping saga", s, err)
	}

	// Ten minutes on: the stock and shipping windows have closed.
	now.Store(t0.Add(10 * time.Minute).UnixNano())
	st, err := tr.Stuck(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 {
		t.Fatalf("Stuck = %+v; want 2", st)
	}
	byKey := map[string]tracker.Summary{}
	for _, s := range st {
		byKey[s.Saga+"/"+s.CorrelationID] = s
	}
	o, ok := byKey["order/order-stuck"]
	if !ok {
		t.Fatalf("Stuck = %+v; want order/order-stuck", st)
	}
	// The observed producer of stock.* (inventory) wins over the declared service.
	if o.Waiting.Step != "reserve stock" || o.Waiting.Service != "inventory" || o.Waiting.After.Type != "payment.authorized" ||
		o.Waiting.Expected[0] != "stock.*" || !o.Waiting.Deadline.Equal(t0.Add(31*time.Second)) || o.DeadLetters != 1 {
		t.Fatalf("stuck order = %+v, waiting %+v", o, o.Waiting)
	}
	sh, ok := byKey["shipping/order-done"]
	if !ok {
		t.Fatalf("Stuck = %+v; want shipping/order-done", st)
	}
	// No shipment.* observed: the declared service is named.
	if sh.Waiting.Step != "order.confirmed" || sh.Waiting.Service != "shipping" {
		t.Fatalf("stuck shipping = %+v, waiting %+v", sh, sh.Waiting)
	}
	if st[0].Saga != "order" {
		t.Fatalf("Stuck order = %s first; want the earliest deadline (order) first", st[0].Saga)
	}

	comp, err := tr.List(ctx, tracker.StatusCompleted)
	if err != nil {
		t.Fatal(err)
	}
	if len(comp) != 1 || comp[0].CorrelationID != "order-done" || comp[0].Saga != "order" ||
		!comp[0].Ended.Equal(t0.Add(3*time.Second)) || comp[0].Events != 4 {
		t.Fatalf("completed = %+v; want order/order-done", comp)
	}

	tl, err := tr.Saga(ctx, "order-stuck")
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Events) != 2 || tl.Events[1].Type != "payment.authorized" || tl.Events[1].Source != "payment" ||
		tl.Events[1].CausationID != stuck[0].ID || tl.Events[1].TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		tl.Events[1].Topic != topic {
		t.Fatalf("timeline events = %+v", tl.Events)
	}
	if len(tl.DeadLetters) != 1 || tl.DeadLetters[0].Reason != "handler" || tl.DeadLetters[0].Error != "inventory: boom" ||
		tl.DeadLetters[0].Topic != topic+tracker.DLQSuffix || tl.DeadLetters[0].ID != stuck[1].ID {
		t.Fatalf("timeline dead letters = %+v", tl.DeadLetters)
	}
	if _, err := tr.Saga(ctx, "nobody"); !errors.Is(err, tracker.ErrNotFound) {
		t.Fatalf("Saga(unknown) error = %v; want ErrNotFound", err)
	}

	// Redelivery of an indexed record adds nothing.
	again := records(t, topic, done[:1])[0]
	again.Partition, again.Offset = tl.Events[0].Partition, tl.Events[0].Offset
	again.Topic = tl.Events[0].Topic
	if n, err := tr.Ingest(ctx, again); err != nil || n != 0 {
		t.Fatalf("re-Ingest = %d, %v; want 0 new", n, err)
	}
	if got := count(); got != want {
		t.Fatalf("rows after redelivery = %d; want %d", got, want)
	}

	// Metrics: the gauges after a refresh, and the order saga's end-to-end latency.
	if err := tr.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	ms := collect(t, reader)
	stuckByStep := map[string]int64{}
	for _, dp := range ms["choreo.tracker.sagas.stuck"].Data.(metricdata.Gauge[int64]).DataPoints {
		saga, _ := dp.Attributes.Value("saga")
		step, _ := dp.Attributes.Value("step")
		stuckByStep[saga.AsString()+"/"+step.AsString()] = dp.Value
	}
	if stuckByStep["order/reserve stock"] != 1 || stuckByStep["shipping/order.confirmed"] != 1 || len(stuckByStep) != 2 {
		t.Fatalf("stuck gauge = %v", stuckByStep)
	}
	lat := ms["choreo.tracker.saga.duration"].Data.(metricdata.Histogram[float64]).DataPoints
	if len(lat) != 1 || lat[0].Count != 1 || lat[0].Sum != 3 {
		t.Fatalf("latency = %+v; want one order saga of 3 s", lat)
	}

	// Counts by kind and status, and a bounded, filtered Find.
	counts, err := tr.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The in-flight gauge counts every declared kind's unended sagas, as Counts does.
	inFlight := map[string]int64{}
	for _, dp := range ms["choreo.tracker.sagas.in_flight"].Data.(metricdata.Gauge[int64]).DataPoints {
		saga, _ := dp.Attributes.Value("saga")
		inFlight[saga.AsString()] = dp.Value
	}
	for _, c := range counts {
		if got, ok := inFlight[c.Saga]; !ok || got != c.InFlight+c.Stuck {
			t.Errorf("in-flight gauge of %s = %d (reported %v), want %d in flight + stuck", c.Saga, got, ok, c.InFlight+c.Stuck)
		}
	}
	if len(inFlight) != len(counts) {
		t.Errorf("in-flight gauge = %v, want one point per kind of %+v", inFlight, counts)
	}
	wantCounts := []tracker.Count{
		{Saga: "order", Stuck: 1, Completed: 1, Since: t0},
		{Saga: "shipping", Stuck: 1, Since: t0.Add(3 * time.Second)},
	}
	if !slices.Equal(counts, wantCounts) {
		t.Fatalf("Counts = %+v; want %+v", counts, wantCounts)
	}
	if got, err := tr.Find(ctx, tracker.Filter{Saga: "order", Limit: 1}); err != nil || len(got) != 1 || got[0].CorrelationID != "order-done" {
		t.Fatalf("Find(order, limit 1) = %+v, %v; want the oldest order saga", got, err)
	}
	if got, err := tr.Find(ctx, tracker.Filter{Status: tracker.StatusStuck, Limit: 1}); err != nil || len(got) != 1 || got[0].Saga != "order" {
		t.Fatalf("Find(stuck, limit 1) = %+v, %v; want the order saga (earliest deadline)", got, err)
	}
	// Rebuild recomputes the summaries from the index alone.
	if _, err := db.Exec(ctx, `TRUNCATE `+tracker.DefaultTable+`_sagas, `+tracker.DefaultTable+`_types`); err != nil {
		t.Fatal(err)
	}
	if err := tr.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if again, err := tr.Stuck(ctx); err != nil || len(again) != 2 || again[0].Waiting.Service != "inventory" || again[0].DeadLetters != 1 {
		t.Fatalf("Stuck after Rebuild = %+v, %v; want the same two", again, err)
	}
	// Retention: nothing is older than an hour at +10 min; everything is at +2 h.
	if n, err := tr.Retain(ctx); err != nil || n != 0 {
		t.Fatalf("Retain at +10m = %d, %v; want 0", n, err)
	}
	now.Store(t0.Add(2 * time.Hour).UnixNano())
	if n, err := tr.Retain(ctx); err != nil || n != int64(want) {
		t.Fatalf("Retain at +2h = %d, %v; want %d", n, err, want)
	}
	if got := count(); got != 0 {
		t.Fatalf("rows after retention = %d; want 0", got)
	}
	if all, err := tr.List(ctx, ""); err != nil || len(all) != 0 {
		t.Fatalf("sagas after retention = %+v, %v; want none", all, err)
	}

	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	for name, c := range map[string]tracker.Config{
		"no sagas":       {},
		"no name":        {Sagas: []tracker.Saga{{Start: []string{"a.b"}}}},
		"no start":       {Sagas: []tracker.Saga{{Name: "x"}}},
		"bad glob":       {Sagas: []tracker.Saga{{Name: "x", Start: []string{"a["}}}},
		"zero window":    {Sagas: []tracker.Saga{{Name: "x", Start: []string{"a"}, Steps: []tracker.Step{{After: "a", Expect: []string{"b"}}}}}},
		"no expect":      {Sagas: []tracker.Saga{{Name: "x", Start: []string{"a"}, Steps: []tracker.Step{{After: "a", Within: 1}}}}},
		"duplicate saga": {Sagas: []tracker.Saga{{Name: "x", Start: []string{"a"}}, {Name: "x", Start: []string{"b"}}}},
	} {
		if err := c.Validate(); !errors.Is(err, tracker.ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v; want ErrInvalidConfig", name, err)
		}
	}
	if _, err := tracker.Schema("Bad-Name"); !errors.Is(err, tracker.ErrInvalidConfig) {
		t.Errorf("Schema(Bad-Name) = %v; want ErrInvalidConfig", err)
	}
}

func TestLoadConfigFiles(t *testing.T) {
	for _, f := range []string{"../deploy/tracker/order.json", "../deploy/tracker/shipping.json"} {
		c, err := tracker.LoadConfig(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(c.Topics) == 0 || len(c.Sagas) == 0 || len(c.Sagas[0].Steps) == 0 {
			t.Fatalf("%s: %+v; want topics, sagas and steps", f, c)
		}
	}
}
