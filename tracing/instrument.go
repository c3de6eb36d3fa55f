package tracing

import (
	"context"
	"fmt"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// InstrumentOption configures [InstrumentPostgres], [RecordPoolStats], [InstrumentRedis],
// [NewKafka] and [KafkaClientMetrics]. It has the shape of every option of the library,
// but every value is valid (nil means the default): it never returns an error, so these
// functions have no configuration error to return.
type InstrumentOption func(*instrumentConfig) error

type instrumentConfig struct {
	tp               trace.TracerProvider
	mp               metric.MeterProvider
	prop             propagation.TextMapPropagator
	rootSpans        bool
	statementMetrics bool
}

func newInstrumentConfig(opts []InstrumentOption) instrumentConfig {
	var c instrumentConfig
	for _, o := range opts {
		_ = o(&c) // never fails: every value is valid
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if !c.rootSpans {
		c.tp = childOnlyProvider{tp: c.tp}
	}
	return c
}

// WithTracerProvider sets the tracer provider. Default: otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) InstrumentOption {
	return func(c *instrumentConfig) error { c.tp = tp; return nil }
}

// WithMeterProvider sets the meter provider. Default: otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) InstrumentOption {
	return func(c *instrumentConfig) error { c.mp = mp; return nil }
}

// WithPropagator sets the propagator [NewKafka] injects and extracts with
// (the other helpers do not propagate). Default: otel.GetTextMapPropagator()
// at the time of each call, or W3C trace context + baggage while the global
// propagator is otel's no-op default.
func WithPropagator(p propagation.TextMapPropagator) InstrumentOption {
	return func(c *instrumentConfig) error { c.prop = p; return nil }
}

// WithRootSpans lets Redis calls made without a span in their context start
// traces of their own (otelpgx never does: it traces a statement only inside
// a recording span). Default: such calls are not traced, because background
// work (relay polling, lock refreshes, sweepers) would otherwise flood the
// backend with one-span traces; calls inside a recorded trace always get
// their client span.
func WithRootSpans() InstrumentOption {
	return func(c *instrumentConfig) error { c.rootSpans = true; return nil }
}

// WithStatementMetrics makes [InstrumentPostgres] record otelpgx's per-statement metrics
// (db.client.operation.duration, a histogram, and db.client.operation.errors)
// for every query, batch, prepare, connect and pool acquire. Default: off,
// because recording a histogram per SQL statement cost 2–4% of each reference
// service's CPU (docs/benchmarks.md) while the consumer's
// choreo.consumer.process.duration already times each handler and its
// transaction, the statement spans time each statement of a sampled trace,
// and the pool's own statistics (pgxpool.*) are recorded either way.
func WithStatementMetrics() InstrumentOption {
	return func(c *instrumentConfig) error { c.statementMetrics = true; return nil }
}

// InstrumentPostgres sets an otelpgx tracer on cfg (next to a tracer already in
// cfg.ConnConfig.Tracer, which is kept and called too): a client span for every query,
// batch, COPY, prepare and connect inside a recorded trace, with the SQL text; none for
// pool acquires (the pool statistics show waits) and no connection details (server,
// port, user and database are the same on every span of a pool). With
// [WithStatementMetrics] it also records otelpgx's per-statement metrics. The spans pick
// up saga.correlation_id and the entity attribute through [CorrelationProcessor]. Parse
// cfg with pgxpool.ParseConfig, adjust it, instrument it, open the pool with
// pgxpool.NewWithConfig, then call [RecordPoolStats]:
//
//	cfg, err := pgxpool.ParseConfig(dsn)
//	tracing.InstrumentPostgres(cfg, tracing.WithTracerProvider(tel.TracerProvider))
//	pool, err := pgxpool.NewWithConfig(ctx, cfg)
//	err = tracing.RecordPoolStats(pool, tracing.WithMeterProvider(tel.MeterProvider))
func InstrumentPostgres(cfg *pgxpool.Config, opts ...InstrumentOption) {
	c := newInstrumentConfig(opts)
	mp := metric.MeterProvider(noopmetric.NewMeterProvider())
	if c.statementMetrics {
		mp = c.mp
	}
	t := otelpgx.NewTracer(
		otelpgx.WithTracerProvider(c.tp),
		otelpgx.WithMeterProvider(mp),
		otelpgx.WithDisableAcquireTracer(),
		otelpgx.WithDisableConnectionDetailsInAttributes(),
	)
	var pt pgx.QueryTracer = t
	if !c.statementMetrics {
		pt = recordingPgx{t: t}
	}
	if prev := cfg.ConnConfig.Tracer; prev != nil {
		cfg.ConnConfig.Tracer = multitracer.New(prev, pt)
		return
	}
	cfg.ConnConfig.Tracer = pt
}

// RecordPoolStats reports pool's statistics (the pgxpool.* connection metrics) through
// the meter provider of opts (default otel.GetMeterProvider()).
func RecordPoolStats(pool *pgxpool.Pool, opts ...InstrumentOption) error {
	c := newInstrumentConfig(opts)
	if err := otelpgx.RecordStats(pool, otelpgx.WithStatsMeterProvider(c.mp)); err != nil {
		return fmt.Errorf("tracing: record postgres pool stats: %w", err)
	}
	return nil
}

// InstrumentRedis adds client spans (one per command or pipeline, with the
// command text, inside a recorded trace; redisotel's span names and
// attributes) and, through github.com/redis/go-redis/extra/redisotel,
// command-duration and connection-pool metrics to rdb (a *redis.Client,
// *redis.ClusterClient or *redis.Ring). Call it once per client, before use.
// The spans come from this package's own hook rather than redisotel's, which
// formats every command and starts a span even when the trace is not
// recorded; there are no dial spans and no caller file/line attributes.
func InstrumentRedis(rdb redis.UniversalClient, opts ...InstrumentOption) error {
	c := newInstrumentConfig(opts)
	h, err := newRedisTracing(rdb, c)
	if err != nil {
		return fmt.Errorf("tracing: instrument redis tracing: %w", err)
	}
	rdb.AddHook(h)
	if err := redisotel.InstrumentMetrics(rdb, redisotel.WithMeterProvider(c.mp)); err != nil {
		return fmt.Errorf("tracing: instrument redis metrics: %w", err)
	}
	return nil
}

// childOnlyProvider hands out tracers that start a span only when the
// context already carries a valid span context (local or remote).
type childOnlyProvider struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

func (p childOnlyProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childOnlyTracer{t: p.tp.Tracer(name, opts...)}
}

type childOnlyTracer struct {
	embedded.Tracer
	t trace.Tracer
}

func (t childOnlyTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		// The non-recording span already in ctx: End and SetAttributes are
		// no-ops, and ctx stays unchanged.
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.t.Start(ctx, name, opts...)
}

// KafkaClientMetrics returns a kgo option that reports the franz-go client's
// broker connections, bytes and records produced and fetched, per broker and
// topic, through franz-go's plugin/kotel meter (messaging.kafka.* counters),
// to the meter provider of opts (default otel.GetMeterProvider()). Only
// kotel's metrics are used: choreo's spans come from [Kafka], which places
// them where the saga needs them. Connection attempts and failures share one
// counter with an outcome attribute.
func KafkaClientMetrics(opts ...InstrumentOption) kgo.Opt {
	var c instrumentConfig
	for _, o := range opts {
		_ = o(&c) // never fails: every value is valid
	}
	mopts := []kotel.MeterOpt{kotel.WithMergedConnectsMeter()}
	if c.mp != nil {
		mopts = append(mopts, kotel.MeterProvider(c.mp))
	}
	return kgo.WithHooks(kotel.NewKotel(kotel.WithMeter(kotel.NewMeter(mopts...))).Hooks()...)
}
