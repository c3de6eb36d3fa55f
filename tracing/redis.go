package tracing

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/extra/rediscmd/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// redisTracing is the go-redis hook of [InstrumentRedis]: one client span per
// command or pipeline, with redisotel's span names and attributes (db.system,
// db.statement, db.redis.num_cmd, db.connection_string). Unlike redisotel's
// hook it does nothing, not even format the command, when the context's span
// is not recording (a trace that is not sampled, or a service that records no
// spans: see [Setup]), so an unrecorded trace costs one check per command.
type redisTracing struct {
	tracer    trace.Tracer
	rootSpans bool
	start     []trace.SpanStartOption
}

// redisTracerName is the instrumentation scope of the Redis spans.
const redisTracerName = "github.com/choreo-saga/choreo/tracing/redis"

func newRedisTracing(rdb redis.UniversalClient, c instrumentConfig) (*redisTracing, error) {
	attrs := []attribute.KeyValue{attribute.String("db.system", "redis")}
	switch rdb := rdb.(type) {
	case *redis.Client:
		o := rdb.Options()
		attrs = append(attrs, attribute.String("db.connection_string", redisConnString(o.Network, o.Addr)))
	case *redis.ClusterClient, *redis.Ring:
	default:
		return nil, fmt.Errorf("%w: redis client %T not supported", ErrInvalidConfig, rdb)
	}
	return &redisTracing{
		tracer:    c.tp.Tracer(redisTracerName),
		rootSpans: c.rootSpans,
		start:     []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...)},
	}, nil
}

func redisConnString(network, addr string) string {
	if network == "" || network == "tcp" {
		network = "redis"
	}
	return network + "://" + addr
}

// traced tells whether a command under ctx gets a span: when its span is
// recording, or, with [WithRootSpans], when ctx has no span at all.
func (h *redisTracing) traced(ctx context.Context) bool {
	span := trace.SpanFromContext(ctx)
	return span.IsRecording() || (h.rootSpans && !span.SpanContext().IsValid())
}

// DialHook implements redis.Hook; dials are not traced (the pool metrics of
// [InstrumentRedis] count connections).
func (h *redisTracing) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *redisTracing) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.traced(ctx) {
			return next(ctx, cmd)
		}
		ctx, span := h.tracer.Start(ctx, cmd.FullName(), h.start...)
		defer span.End()
		span.SetAttributes(attribute.String("db.statement", rediscmd.CmdString(cmd)))
		err := next(ctx, cmd)
		redisSpanError(span, err)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *redisTracing) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.traced(ctx) {
			return next(ctx, cmds)
		}
		summary, text := rediscmd.CmdsString(cmds)
		ctx, span := h.tracer.Start(ctx, "redis.pipeline "+summary, h.start...)
		defer span.End()
		span.SetAttributes(attribute.Int("db.redis.num_cmd", len(cmds)), attribute.String("db.statement", text))
		err := next(ctx, cmds)
		redisSpanError(span, err)
		return err
	}
}

func redisSpanError(span trace.Span, err error) {
	if err != nil && err != redis.Nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

var _ redis.Hook = (*redisTracing)(nil)
