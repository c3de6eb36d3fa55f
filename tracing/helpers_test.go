package tracing_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracing"
)

// TestMain installs the W3C propagator as the global one, as Setup does in a
// service: Inject and Extract read it.
func TestMain(m *testing.M) {
	otel.SetTextMapPropagator(tracing.NewPropagator())
	os.Exit(m.Run())
}

// newRecorder returns an always-sampling SDK tracer provider that records
// every ended span in memory and stamps correlation attributes like Setup.
func newRecorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(tracing.CorrelationProcessor()),
		sdktrace.WithSpanProcessor(rec),
	)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// spanNamed returns the only ended span called name.
func spanNamed(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		var names []string
		for _, s := range rec.Ended() {
			names = append(names, s.Name())
		}
		t.Fatalf("want exactly one span %q, found %d among %q", name, len(found), names)
	}
	return found[0]
}

// attrs returns a span's attributes as strings keyed by name.
func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := make(map[string]string)
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

// kafkaClient returns a client for brokers, closed at cleanup.
func kafkaClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// consumeOne consumes the first record of topic with cl (which must have been
// created with kgo.ConsumeTopics(topic)).
func consumeOne(t *testing.T, cl *kgo.Client) *kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no record consumed: %v", err)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s[%d]: %v", topic, p, err)
		})
		if recs := fs.Records(); len(recs) > 0 {
			return recs[0]
		}
	}
}

// kafkaTopic returns brokers and a fresh one-partition topic.
func kafkaTopic(t *testing.T) ([]string, string) {
	t.Helper()
	brokers := testenv.Kafka(t)
	return brokers, testenv.Topic(t, brokers, 1)
}

// newPool opens a pool on the test database instrumented by tracing.InstrumentPostgres
// and tracing.RecordPoolStats.
func newPool(t *testing.T, opts ...tracing.InstrumentOption) (*pgxpool.Pool, error) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	if err != nil {
		return nil, err
	}
	tracing.InstrumentPostgres(cfg, opts...)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	if err := tracing.RecordPoolStats(pool, opts...); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}
