package tracing_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/tracing"
)

// A service's main: telemetry from the OTEL_* environment, /metrics from the
// returned registry, ids in every log line, instrumented Postgres.
func ExampleSetup() {
	ctx := context.Background()
	tel, err := tracing.Setup(ctx, "order")
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		// Bound the final flush: a collector that went away must not hold
		// up the exit.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(ctx); err != nil {
			log.Print(err)
		}
	}()

	slog.SetDefault(slog.New(tracing.NewLogHandler(slog.NewJSONHandler(os.Stderr, nil))))

	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	inst := []tracing.InstrumentOption{
		tracing.WithTracerProvider(tel.TracerProvider), tracing.WithMeterProvider(tel.MeterProvider),
	}
	tracing.InstrumentPostgres(cfg, inst...)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := tracing.RecordPoolStats(pool, inst...); err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", tel.MetricsHandler())
	_ = mux
}

// Trace context and the saga's correlation id travel in W3C headers that any
// Kafka client can read.
func ExampleInject() {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	ctx = tracing.WithCorrelationID(ctx, "order-48271")

	r := &kgo.Record{Topic: "orders.events"}
	tracing.Inject(ctx, r) // uses the global propagator that Setup installs
	for _, h := range r.Headers {
		fmt.Printf("%s: %s\n", h.Key, h.Value)
	}

	back := tracing.Extract(context.Background(), r)
	fmt.Println("continues trace:", trace.SpanContextFromContext(back).TraceID() == sc.TraceID())
	fmt.Println("correlation id:", tracing.CorrelationID(back))
	// Output:
	// traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
	// baggage: saga.correlation_id=order-48271
	// continues trace: true
	// correlation id: order-48271
}

// Every log line written with a context names its trace, span, saga and
// entity, even from a grouped logger.
func ExampleNewLogHandler() {
	drop := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	logger := slog.New(tracing.NewLogHandler(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: drop})))

	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:  trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	ctx = tracing.WithCorrelationID(ctx, "o-1")
	ctx = tracing.WithEntity(ctx, "order.id", "o-1")

	logger.WithGroup("payment").InfoContext(ctx, "charged", "amount", 1250)
	// Output:
	// {"level":"INFO","msg":"charged","trace_id":"0102030405060708090a0b0c0d0e0f10","span_id":"0102030405060708","correlation_id":"o-1","order.id":"o-1","payment":{"amount":1250}}
}

// The relay's send span and the consumer's process span follow the OTel
// messaging conventions and share one trace through the record's headers.
func ExampleKafka() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	k := tracing.NewKafka(tracing.WithTracerProvider(tp), tracing.WithPropagator(tracing.NewPropagator()))

	r := &kgo.Record{Topic: "orders.events", Key: []byte("o-1"), Value: []byte(`{}`)}
	_, send := k.StartSend(context.Background(), r)
	// ... client.Produce(ctx, r, func(r *kgo.Record, err error) { tracing.EndSend(send, r, err) })
	r.Partition, r.Offset = 0, 41
	tracing.EndSend(send, r, nil)

	// In the consumer, for the fetched record:
	_, process := k.StartProcess(context.Background(), r, "payment")
	process.End()

	spans := rec.Ended()
	for _, s := range spans {
		fmt.Println(s.Name(), s.SpanKind())
	}
	fmt.Println("same trace:", spans[0].SpanContext().TraceID() == spans[1].SpanContext().TraceID())
	fmt.Println("process is child of send:", spans[1].Parent().SpanID() == spans[0].SpanContext().SpanID())
	// Output:
	// send orders.events producer
	// process orders.events consumer
	// same trace: true
	// process is child of send: true
}
