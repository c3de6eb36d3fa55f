package tracing_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracing"
)

// Each benchmark pairs choreo's operation with its floor: the same work done
// by the underlying library alone. The difference is what tracing costs per
// record on top of OpenTelemetry itself. Spans are recorded by the SDK but
// not exported (no exporter), as in a service without a collector.

func benchProvider(b *testing.B, correlation bool) *sdktrace.TracerProvider {
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(sdktrace.AlwaysSample())}
	if correlation {
		opts = append(opts, sdktrace.WithSpanProcessor(tracing.CorrelationProcessor()))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

func benchRecord(b *testing.B) *kgo.Record {
	ev, err := event.New("order", "order.created", "o-48271", map[string]int{"qty": 1})
	if err != nil {
		b.Fatal(err)
	}
	r, err := event.ToRecord("orders.events", ev)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func sagaContext(b *testing.B, tp *sdktrace.TracerProvider) context.Context {
	ctx := tracing.WithEntity(tracing.WithCorrelationID(context.Background(), "o-48271"), "order.id", "o-48271")
	ctx, span := tp.Tracer("bench").Start(ctx, "handler")
	b.Cleanup(func() { span.End() })
	return ctx
}

// BenchmarkPropagation: W3C trace context + baggage into a record's headers
// and back (what the outbox and every consumer do per record).
func BenchmarkPropagation(b *testing.B) {
	tp := benchProvider(b, false)
	ctx := sagaContext(b, tp)
	r := benchRecord(b)
	b.Run("inject+extract", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tracing.Inject(ctx, r)
			_ = tracing.Extract(context.Background(), r)
		}
	})
}

// BenchmarkKafkaSpans: a send span (start, inject, end with partition and
// offset) plus a process span (extract, start, end) per record, against the
// floor of two bare SDK spans.
func BenchmarkKafkaSpans(b *testing.B) {
	tp := benchProvider(b, true)
	ctx := sagaContext(b, tp)
	r := benchRecord(b)
	k := tracing.NewKafka(tracing.WithTracerProvider(tp))
	b.Run("floor=2 bare SDK spans", func(b *testing.B) {
		b.ReportAllocs()
		tr := tp.Tracer("bench")
		for b.Loop() {
			_, s1 := tr.Start(ctx, "send")
			s1.End()
			_, s2 := tr.Start(ctx, "process")
			s2.End()
		}
	})
	b.Run("send+process", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, send := k.StartSend(ctx, r)
			tracing.EndSend(send, r, nil)
			_, process := k.StartProcess(context.Background(), r, "payment")
			process.End()
		}
	})
}

// BenchmarkCorrelationProcessor: what stamping saga.correlation_id and the
// entity on every span costs, against the same span without the processor.
func BenchmarkCorrelationProcessor(b *testing.B) {
	for _, tc := range []struct {
		name        string
		correlation bool
	}{{"floor=without", false}, {"with", true}} {
		b.Run(tc.name, func(b *testing.B) {
			tp := benchProvider(b, tc.correlation)
			ctx := sagaContext(b, tp)
			tr := tp.Tracer("bench")
			b.ReportAllocs()
			for b.Loop() {
				_, s := tr.Start(ctx, "query")
				s.End()
			}
		})
	}
}

// BenchmarkLogHandler: one log line with 4 attributes through slog's JSON
// handler, bare (floor) and wrapped by NewLogHandler (adds trace_id, span_id,
// correlation_id, order.id), with and without a group.
func BenchmarkLogHandler(b *testing.B) {
	tp := benchProvider(b, false)
	ctx := sagaContext(b, tp)
	base := slog.NewJSONHandler(io.Discard, nil)
	for _, tc := range []struct {
		name   string
		logger *slog.Logger
	}{
		{"floor=json", slog.New(base)},
		{"wrapped", slog.New(tracing.NewLogHandler(base))},
		{"wrapped+group", slog.New(tracing.NewLogHandler(base)).WithGroup("g")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tc.logger.LogAttrs(ctx, slog.LevelInfo, "consumer: record handled",
					slog.String("topic", "orders.events"), slog.Int("partition", 3),
					slog.Int64("offset", 48271), slog.String("outcome", "handled"))
			}
		})
	}
}

// BenchmarkPgxQuery: one "SELECT $1::int" round trip to the real Postgres,
// bare pgx (floor), through a pool instrumented by InstrumentPostgres outside any trace (the
// relay's polling: no span), and inside a trace (one otelpgx client span
// with correlation attributes).
func BenchmarkPgxQuery(b *testing.B) {
	dsn := testenv.PostgresDSN(b)
	tp := benchProvider(b, true)
	ctx := context.Background()
	bare, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(bare.Close)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	tracing.InstrumentPostgres(cfg, tracing.WithTracerProvider(tp))
	traced, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(traced.Close)
	for _, tc := range []struct {
		name string
		pool *pgxpool.Pool
		ctx  context.Context
	}{
		{"floor=bare pgx", bare, ctx},
		{"instrumented, no trace", traced, ctx},
		{"instrumented, in trace", traced, sagaContext(b, tp)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			var n int
			for b.Loop() {
				if err := tc.pool.QueryRow(tc.ctx, "SELECT $1::int", 1).Scan(&n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
