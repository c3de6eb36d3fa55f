package tracing_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracing"
)

// Queries inside a trace get otelpgx client spans carrying the saga's
// correlation attributes; queries outside any trace (background polling)
// start no traces of their own.
func TestInstrumentPostgresTracesQueriesInsideATrace(t *testing.T) {
	tp, rec := newRecorder(t)
	ctx := context.Background()
	pool, err := newPool(t, tracing.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	var one int
	if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans from a query outside any trace, want 0", n)
	}

	sctx := tracing.WithEntity(tracing.WithCorrelationID(ctx, "o-3"), "order.id", "o-3")
	sctx, parent := tp.Tracer("t").Start(sctx, "handler")
	if err := pool.QueryRow(sctx, "SELECT $1::int", 2).Scan(&one); err != nil {
		t.Fatal(err)
	}
	parent.End()

	// pgx prepares the statement, so there is a query span (child of the
	// handler) and a prepare span under it; both carry the statement.
	direct := 0
	for _, s := range rec.Ended() {
		if s.SpanKind() != trace.SpanKindClient || attrs(s)["db.query.text"] != "SELECT $1::int" {
			continue
		}
		if s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("query span %s is in another trace", s.Name())
		}
		if s.Parent().SpanID() == parent.SpanContext().SpanID() {
			direct++
		}
		a := attrs(s)
		if a[tracing.AttrCorrelationID] != "o-3" || a["order.id"] != "o-3" || a["db.system.name"] != "postgresql" {
			t.Errorf("query span attributes = %v", a)
		}
	}
	if direct != 1 {
		t.Fatalf("%d client spans for the query directly under the handler span, want 1", direct)
	}
}

func TestInstrumentRedisTracesCommandsInsideATrace(t *testing.T) {
	tp, rec := newRecorder(t)
	rdb, ns := testenv.Redis(t)
	if err := tracing.InstrumentRedis(rdb, tracing.WithTracerProvider(tp)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := rdb.Set(ctx, ns+"outside", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans from a command outside any trace, want 0", n)
	}

	sctx, parent := tp.Tracer("t").Start(tracing.WithCorrelationID(ctx, "o-4"), "handler")
	if err := rdb.Set(sctx, ns+"inside", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	parent.End()
	s := spanNamed(t, rec, "set")
	if s.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("redis span parent = %s, want handler span", s.Parent().SpanID())
	}
	if a := attrs(s); a[tracing.AttrCorrelationID] != "o-4" || a["db.system"] != "redis" {
		t.Errorf("redis span attributes = %v", a)
	}
}

func TestWithRootSpansTracesOrphanCommands(t *testing.T) {
	tp, rec := newRecorder(t)
	rdb, ns := testenv.Redis(t)
	if err := tracing.InstrumentRedis(rdb, tracing.WithTracerProvider(tp), tracing.WithRootSpans()); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Get(context.Background(), ns+"missing").Err(); err == nil {
		t.Fatal("GET of a missing key succeeded")
	}
	s := spanNamed(t, rec, "get")
	if s.Parent().IsValid() {
		t.Fatalf("orphan command span has parent %v", s.Parent())
	}
}

func TestKafkaClientMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	brokers, topic := kafkaTopic(t)
	cl := kafkaClient(t, brokers, tracing.KafkaClientMetrics(tracing.WithMeterProvider(mp)))
	for range 3 {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	collect := func() map[string]int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
					for _, dp := range sum.DataPoints {
						got[m.Name] += dp.Value
					}
				}
			}
		}
		return got
	}
	// franz-go calls the batch-written hook after it has resolved the
	// produce promises, so the counter may trail ProduceSync briefly.
	var got map[string]int64
	testenv.Eventually(t, testenv.Timeout, "the produced-records counter", func() bool {
		got = collect()
		return got["messaging.kafka.produce_records.count"] >= 3
	})
	if got["messaging.kafka.produce_records.count"] != 3 {
		t.Errorf("produced records counter = %d, want 3 (all: %v)", got["messaging.kafka.produce_records.count"], got)
	}
	if got["messaging.kafka.connects.count"] == 0 {
		t.Errorf("no broker connections counted (all: %v)", got)
	}
}

// otelpgx's per-statement metrics are recorded only with WithStatementMetrics.
func TestInstrumentPostgresStatementMetricsOptIn(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []tracing.InstrumentOption
		want bool
	}{{"default", nil, false}, {"WithStatementMetrics", []tracing.InstrumentOption{tracing.WithStatementMetrics()}, true}} {
		t.Run(tc.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			tp, _ := newRecorder(t)
			pool, err := newPool(t, append([]tracing.InstrumentOption{tracing.WithMeterProvider(mp), tracing.WithTracerProvider(tp)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			ctx, span := tp.Tracer("t").Start(context.Background(), "handler")
			var one int
			if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
				t.Fatal(err)
			}
			span.End()
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			names := map[string]bool{}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					names[m.Name] = true
				}
			}
			if names["db.client.operation.duration"] != tc.want {
				t.Errorf("db.client.operation.duration recorded = %v, want %v (metrics %v)", !tc.want, tc.want, names)
			}
		})
	}
}
