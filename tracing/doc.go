// Package tracing makes one saga one trace, and makes that trace findable by
// the saga's correlation id and entity id.
//
// # Setup
//
// [Setup] builds the OpenTelemetry SDK for a service from the standard OTEL_*
// environment variables and returns a [Telemetry] holding the tracer
// provider, the meter provider, the W3C propagator and a Prometheus registry
// for /metrics ([Telemetry.MetricsHandler]). Call [Telemetry.Shutdown] with
// a deadline on exit.
//
//	OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES   resource (env beats code)
//	OTEL_TRACES_EXPORTER     otlp | console | none; unset: otlp only if an endpoint is set
//	OTEL_METRICS_EXPORTER    otlp | console | prometheus | none; same rule
//	OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]ENDPOINT, _PROTOCOL (grpc | http/protobuf),
//	  _HEADERS, _TIMEOUT, ...  read by the OTLP exporters
//	OTEL_TRACES_SAMPLER[_ARG], OTEL_BSP_*, OTEL_METRIC_EXPORT_INTERVAL   read by the SDK
//	OTEL_SDK_DISABLED=true   no exporters
//
// With no endpoint configured nothing is exported, nothing connects and
// nothing logs export errors. Unless OTEL_TRACES_SAMPLER names a sampler, the
// sampler is then parentbased_always_off: traces that start here or arrive
// unsampled are not recorded (nothing would read them); their spans carry
// trace and span ids only, so trace ids still reach logs, Kafka headers and
// HTTP headers (traceparent) at a fraction of the CPU
// ([Telemetry.RecordsSpans]; docs/benchmarks.md). A trace that
// arrives sampled stays sampled: its spans here are recorded and dropped, and
// the traceparent this service propagates keeps the sampled flag, so a
// service between two exporting ones never cuts their trace. This rule
// (the OTel default would export to localhost) is why Setup picks exporters
// itself instead of using go.opentelemetry.io/contrib/exporters/autoexport.
//
// Setup also installs its providers and propagator as the otel globals,
// because instrumentation libraries and [Inject]/[Extract] read them, and an
// error handler that logs each distinct OpenTelemetry error at most once a
// minute through slog ([WithLogger]);
// [WithoutGlobals] turns that off. Code of your own should take the providers
// from Telemetry's fields rather than from the globals: every choreo package
// accepts them one way, through options named WithTracerProvider,
// WithMeterProvider and WithLogger (default: the otel globals and
// slog.Default()).
//
// # Correlation
//
// [WithCorrelationID] and [WithEntity] put the saga's id and the entity being
// worked on (e.g. "order.id") into a context. From there they reach:
//
//   - every span started in that context, as saga.correlation_id and the
//     entity attribute, through [CorrelationProcessor] (installed by Setup) —
//     including the client spans of otelpgx, Redis and otelhttp;
//   - W3C baggage (correlation id only), hence outgoing records and requests;
//   - every log line, through the slog handler of [NewLogHandler], with
//     trace_id and span_id.
//
// # Kafka
//
// [RecordCarrier] adapts franz-go record headers to the OTel carrier
// interface (Set replaces). [Inject] and [Extract] use it with the global
// propagator. [Kafka] starts producer ("send <topic>") and consumer
// ("process <topic>") spans with the OTel messaging semantic conventions; the
// headers are plain W3C, so records produced or consumed through franz-go's
// plugin/kotel, or any other OTel-instrumented client, join the same trace.
// kotel's tracer is not used for choreo's own spans: its hooks open a span
// when a record is buffered, while the outbox relay must parent its send span
// on the trace context stored with the outbox row, long after the request
// that wrote it. kotel's meter is: [KafkaClientMetrics] adds its broker and
// throughput counters to a client.
//
// # Postgres and Redis
//
// [InstrumentPostgres] wires github.com/exaring/otelpgx into a pgx pool config (a client span
// per statement with its SQL text; per-statement metrics only with
// [WithStatementMetrics]) and [InstrumentRedis] adds a client span per Redis
// command or pipeline and github.com/redis/go-redis/extra/redisotel's metrics
// to a go-redis client. They trace only calls made inside a recorded trace,
// so background polling and lock refreshes do not flood the tracing backend
// with one-span traces ([WithRootSpans] changes that for Redis), and an
// unrecorded trace costs them one check per call.
package tracing
