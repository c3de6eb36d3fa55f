package tracing_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracing"
)

// The per-event cost of each telemetry layer, in three trace modes:
//
//   - ids-only: what Setup builds without an exporter for a trace that
//     starts unsampled (parentbased_always_off on an unsampled trace: spans
//     carry ids, nothing is recorded);
//   - recorded: every span recorded (parentbased_always_on, correlation
//     processor) and dropped, which is also what Setup without an exporter
//     does for a trace that arrives sampled;
//   - exported: recorded and handed to a batch span processor whose exporter
//     discards the batches (the production path minus the network).
//
// See docs/benchmarks.md for the figures.

// cpuTime returns the CPU time (user + system) this process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per iteration since start as
// cpu-ns/op: on a shared machine the CPU a layer burns (including the batch
// span processor's goroutine and the GC) is steadier than the wall time.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

// discardExporter is a span exporter that drops what it is given.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

var traceModes = []string{"ids-only", "recorded", "exported"}

func modeProvider(b *testing.B, mode string) *sdktrace.TracerProvider {
	var opts []sdktrace.TracerProviderOption
	switch mode {
	case "ids-only":
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	case "recorded":
		opts = append(opts, sdktrace.WithSpanProcessor(tracing.CorrelationProcessor()))
	case "exported":
		opts = append(opts, sdktrace.WithSpanProcessor(tracing.CorrelationProcessor()), sdktrace.WithBatcher(discardExporter{}))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

func benchMeter(b *testing.B) *sdkmetric.MeterProvider {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp
}

// sagaStatements are the statements of one handled event's transaction.
var sagaStatements = []struct{ sql, tag string }{
	{"begin", "BEGIN"},
	{"SELECT key FROM choreo_idempotency WHERE scope = $1 AND key = $2", "SELECT 0"},
	{"UPDATE inventory_stock SET reserved = reserved + $2 WHERE sku = $1", "UPDATE 1"},
	{"INSERT INTO choreo_outbox (topic, key, value, headers) VALUES ($1, $2, $3, $4)", "INSERT 0 1"},
	{"commit", "COMMIT"},
}

// BenchmarkEventTelemetry: the telemetry of one consumed-and-republished
// event without its I/O: a process span, the correlation annotations, the
// pgx tracer hooks of a five-statement transaction (called directly, with a
// real connection for the connection attributes) and the send span of the
// event it publishes. "otelpgx defaults" is otelpgx's default
// configuration (acquire spans, connection attributes, a duration histogram per
// statement); "choreo" is InstrumentPostgres's configuration, "choreo+statement
// metrics" the same with WithStatementMetrics.
func BenchmarkEventTelemetry(b *testing.B) {
	conn, err := pgx.Connect(context.Background(), testenv.PostgresDSN(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(context.Background()) })
	in := benchRecord(b)
	in.Partition, in.Offset = 3, 48271
	for _, mode := range traceModes {
		for _, inst := range []string{"otelpgx defaults", "choreo+statement metrics", "choreo"} {
			b.Run(mode+"/"+inst, func(b *testing.B) {
				tp, mp := modeProvider(b, mode), benchMeter(b)
				var pt pgx.QueryTracer
				switch inst {
				case "choreo":
					pt = tracing.PgxTracerForTest(tracing.WithTracerProvider(tp), tracing.WithMeterProvider(mp))
				case "choreo+statement metrics":
					pt = tracing.PgxTracerForTest(tracing.WithTracerProvider(tp), tracing.WithMeterProvider(mp), tracing.WithStatementMetrics())
				default:
					pt = otelpgx.NewTracer(otelpgx.WithTracerProvider(tp), otelpgx.WithMeterProvider(mp))
				}
				k := tracing.NewKafka(tracing.WithTracerProvider(tp))
				tags := make([]pgconn.CommandTag, len(sagaStatements))
				for i, s := range sagaStatements {
					tags[i] = pgconn.NewCommandTag(s.tag)
				}
				b.ReportAllocs()
				start := cpuTime(b)
				for b.Loop() {
					ctx, process := k.StartProcess(context.Background(), in, "inventory")
					ctx = tracing.WithEntity(tracing.WithCorrelationID(ctx, "o-48271"), "order.id", "o-48271")
					tracing.AnnotateSpan(ctx)
					for i, s := range sagaStatements {
						qctx := pt.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: s.sql})
						pt.TraceQueryEnd(qctx, conn, pgx.TraceQueryEndData{CommandTag: tags[i]})
					}
					out := &kgo.Record{Topic: "inventory.events", Key: in.Key, Value: in.Value, Headers: in.Headers[:len(in.Headers):len(in.Headers)]}
					_, send := k.StartSend(ctx, out)
					out.Partition, out.Offset = 1, 9
					tracing.EndSend(send, out, nil)
					process.End()
				}
				reportCPU(b, start)
			})
		}
	}
}

// BenchmarkRedisCommand: one SET to the real Redis inside a saga span, bare
// (floor), through redisotel's tracing and metrics hooks, and through InstrumentRedis
// (its own tracing hook that skips unrecorded traces, redisotel's metrics hook), per trace
// mode. The round trip dominates; the differences are the hooks' CPU.
func BenchmarkRedisCommand(b *testing.B) {
	for _, mode := range traceModes {
		for _, inst := range []string{"floor=bare", "redisotel tracing+metrics", "choreo"} {
			b.Run(mode+"/"+inst, func(b *testing.B) {
				tp, mp := modeProvider(b, mode), benchMeter(b)
				rdb, ns := testenv.Redis(b)
				switch inst {
				case "redisotel tracing+metrics":
					if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tp), redisotel.WithCallerEnabled(false)); err != nil {
						b.Fatal(err)
					}
					if err := redisotel.InstrumentMetrics(rdb, redisotel.WithMeterProvider(mp)); err != nil {
						b.Fatal(err)
					}
				case "choreo":
					if err := tracing.InstrumentRedis(rdb, tracing.WithTracerProvider(tp), tracing.WithMeterProvider(mp)); err != nil {
						b.Fatal(err)
					}
				}
				ctx := tracing.WithEntity(tracing.WithCorrelationID(context.Background(), "o-48271"), "order.id", "o-48271")
				ctx, span := tp.Tracer("bench").Start(ctx, "handler")
				b.Cleanup(func() { span.End() })
				b.ReportAllocs()
				start := cpuTime(b)
				for b.Loop() {
					if err := rdb.Set(ctx, ns+"k", "v", 0).Err(); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, start)
			})
		}
	}
}
