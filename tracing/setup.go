package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// ErrInvalidConfig is returned (wrapped) by [Setup] when its arguments or the
// OTEL_* environment describe a configuration that cannot work, for example an
// empty service name, an unknown OTEL_TRACES_EXPORTER value or an unsupported
// OTEL_EXPORTER_OTLP_PROTOCOL.
var ErrInvalidConfig = errors.New("tracing: invalid configuration")

// Names of the standard OpenTelemetry environment variables [Setup] consults
// itself. Everything else under OTEL_* (headers, timeouts, TLS, batch sizes,
// OTEL_TRACES_SAMPLER_ARG, ...) is read by the SDK and the exporters directly.
const (
	envSDKDisabled          = "OTEL_SDK_DISABLED"
	envServiceName          = "OTEL_SERVICE_NAME"
	envTracesExporter       = "OTEL_TRACES_EXPORTER"
	envMetricsExporter      = "OTEL_METRICS_EXPORTER"
	envOTLPEndpoint         = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envOTLPTracesEndpoint   = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envOTLPMetricsEndpoint  = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
	envOTLPProtocol         = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envOTLPTracesProtocol   = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envOTLPMetricsProtocol  = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
	envTracesSampler        = "OTEL_TRACES_SAMPLER"
	envTracesSamplerArg     = "OTEL_TRACES_SAMPLER_ARG"
	envResourceAttributes   = "OTEL_RESOURCE_ATTRIBUTES"
	defaultOTLPProtocolName = "http/protobuf"
)

// Telemetry is what [Setup] built: the SDK providers, the propagator and the
// Prometheus registry behind /metrics. Pass its fields to the code that needs
// them (kgo hooks, otelhttp, and [InstrumentPostgres], [InstrumentRedis] and [NewKafka]
// through [WithTracerProvider], [WithMeterProvider] and [WithPropagator])
// instead of reading the otel globals.
type Telemetry struct {
	// TracerProvider is the SDK tracer provider. Every span it starts has a
	// trace and span id (for propagation and logs); whether spans are also
	// recorded is told by RecordsSpans.
	TracerProvider *sdktrace.TracerProvider
	// RecordsSpans is false when [Setup] found nothing that would read a
	// recorded span (no exporter, no [WithSpanProcessor], no
	// OTEL_TRACES_SAMPLER, no [WithSampler]). Spans then follow their parent:
	// a root span, or a span whose parent is not sampled, carries ids only and
	// is neither recorded nor marked sampled; a span whose parent is sampled
	// (a traceparent ending in "-01" on the incoming record or request) is
	// recorded and sampled, so the parent's decision reaches the services
	// downstream. See [Setup].
	RecordsSpans bool
	// MeterProvider is the SDK meter provider. It always has a Prometheus
	// reader registered in Registry, plus an OTLP push reader when
	// configured.
	MeterProvider *sdkmetric.MeterProvider
	// Propagator is W3C tracecontext + W3C baggage.
	Propagator propagation.TextMapPropagator
	// Registry is the Prometheus registry holding the OTel metrics (and, by
	// default, the Go runtime and process collectors). Serve it with
	// MetricsHandler; it is never the client_golang default registry.
	Registry *prometheus.Registry
	// Resource describes this process (service.name, host, runtime, and
	// OTEL_RESOURCE_ATTRIBUTES).
	Resource *resource.Resource
	// TracesExporter names the span exporters in use, comma-separated:
	// "otlp/grpc", "otlp/http/protobuf", "console"; "" when spans are not
	// exported.
	TracesExporter string
	// MetricsExporter names the push metric exporters in use, like
	// TracesExporter; "" when metrics are only pulled via Registry.
	MetricsExporter string

	shutdownOnce sync.Once
	shutdownErr  error
}

// MetricsHandler returns the http.Handler to mount at /metrics: the
// Prometheus text/OpenMetrics exposition of t.Registry.
func (t *Telemetry) MetricsHandler() http.Handler {
	return prometheusHandler(t.Registry)
}

// Shutdown flushes pending spans and metrics and stops the exporters. It
// honours ctx's deadline (an unreachable collector costs at most that long)
// and is safe to call more than once; later calls return the first result.
// The otel globals set by [Setup] are left in place, so late spans end up in
// a shut-down provider and are dropped.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.shutdownOnce.Do(func() {
		var errs []error
		if err := t.TracerProvider.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("tracing: shut down tracer provider: %w", err))
		}
		if err := t.MeterProvider.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("tracing: shut down meter provider: %w", err))
		}
		t.shutdownErr = errors.Join(errs...)
	})
	return t.shutdownErr
}

// Option configures [Setup]. An invalid value (a nil sampler, span processor, metric
// reader or registry) is an error from Setup that wraps [ErrInvalidConfig].
type Option func(*setupConfig) error

type setupConfig struct {
	globals       bool
	sampler       sdktrace.Sampler
	processors    []sdktrace.SpanProcessor
	readers       []sdkmetric.Reader
	registry      *prometheus.Registry
	resourceAttrs []attribute.KeyValue
	noCorrelation bool
	errorLogger   *slog.Logger
}

// WithoutGlobals stops [Setup] from installing its providers and propagator
// as the otel globals. By default Setup sets otel.SetTracerProvider,
// otel.SetMeterProvider, otel.SetTextMapPropagator and otel.SetErrorHandler
// (see [WithLogger]), because
// instrumentation libraries (otelhttp, kotel, otelpgx, redisotel) and this
// package's [Inject]/[Extract] fall back to them when not handed a provider.
// Use this in tests that run several Setups in one process.
func WithoutGlobals() Option {
	return func(c *setupConfig) error { c.globals = false; return nil }
}

// WithSampler overrides the sampler. Default: the one named by
// OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG, else parentbased_always_on
// when spans are exported or processed, else parentbased_always_off (the
// parent's decision is kept, roots carry ids only; see [Setup]).
func WithSampler(s sdktrace.Sampler) Option {
	return func(c *setupConfig) error { c.sampler = s; return notNil("WithSampler", s == nil) }
}

// WithSpanProcessor adds a span processor after the exporter's batcher, for
// example a tracetest.SpanRecorder in tests. Like an exporter, it makes
// [Setup] record spans. Default: none.
func WithSpanProcessor(p sdktrace.SpanProcessor) Option {
	return func(c *setupConfig) error {
		c.processors = append(c.processors, p)
		return notNil("WithSpanProcessor", p == nil)
	}
}

// WithMetricReader adds a metric reader besides the Prometheus one, for
// example an sdkmetric.ManualReader in tests. Default: none.
func WithMetricReader(r sdkmetric.Reader) Option {
	return func(c *setupConfig) error {
		c.readers = append(c.readers, r)
		return notNil("WithMetricReader", r == nil)
	}
}

// WithRegistry makes the Prometheus exporter register in reg instead of a
// fresh registry; use it to serve OTel metrics next to collectors you already
// registered. Default: a new registry with the Go runtime and process
// collectors. The client_golang default registry is never used.
func WithRegistry(reg *prometheus.Registry) Option {
	return func(c *setupConfig) error { c.registry = reg; return notNil("WithRegistry", reg == nil) }
}

// WithResourceAttributes adds attributes to the resource, for example
// semconv.ServiceVersion("1.4.2"). OTEL_RESOURCE_ATTRIBUTES and
// OTEL_SERVICE_NAME override them, so operators keep the last word.
func WithResourceAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *setupConfig) error { c.resourceAttrs = append(c.resourceAttrs, attrs...); return nil }
}

// WithoutCorrelationAttributes stops [Setup] from installing the
// [CorrelationProcessor], which copies saga.correlation_id and the entity
// attribute from the context onto every span started in it (including the
// spans of otelpgx, redisotel and otelhttp). Default: installed.
func WithoutCorrelationAttributes() Option {
	return func(c *setupConfig) error { c.noCorrelation = true; return nil }
}

// notNil is the error of an option given nil where it needs a value.
func notNil(option string, isNil bool) error {
	if isNil {
		return fmt.Errorf("%w: %s(nil)", ErrInvalidConfig, option)
	}
	return nil
}

// Setup builds the OpenTelemetry SDK for one service from the standard OTEL_*
// environment variables and returns it; call [Telemetry.Shutdown] before the
// process exits. serviceName is the service.name resource attribute unless
// OTEL_SERVICE_NAME overrides it.
//
// Traces. Every span gets a trace id and a span id, so trace ids reach the
// logs and the Kafka and HTTP headers (traceparent) whether or not anything is
// exported. With an exporter (or a [WithSpanProcessor]) spans are sampled by
// OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG, default parentbased_always_on.
// Without one, and unless OTEL_TRACES_SAMPLER or [WithSampler] names a sampler,
// the sampler is parentbased_always_off: this service never changes the
// decision of the trace it continues. A trace that starts here, or arrives
// unsampled ("-00"), is not recorded (no attributes, no events, no span
// processors run, and otelpgx and the Redis hook skip their client spans),
// since nothing would read it; its spans still carry ids, and the traceparent
// they propagate stays "-00". A trace that arrives sampled ("-01") is recorded
// (and dropped, as nothing exports it), and everything this service propagates
// in it keeps the sampled flag, so downstream services that export record the
// rest of the trace. [Telemetry.RecordsSpans] is false in this mode. The
// exporter is chosen by OTEL_TRACES_EXPORTER:
//
//   - unset: OTLP if OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, otherwise none. This is the
//     one deviation from the OTel default ("otlp" to localhost): a service
//     started without a collector neither blocks nor logs export errors.
//   - "otlp": OTLP even without an endpoint (the exporter's localhost
//     default); the transport follows OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
//     OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" (e.g. Jaeger :4317) or
//     "http/protobuf" (default, e.g. Jaeger :4318).
//   - "console": pretty-printed JSON on stdout. "none": no exporter.
//   - a comma-separated list, e.g. "otlp,console": each of them.
//
// Exported spans go through a batch processor (OTEL_BSP_* apply). Exporters
// connect lazily, so Setup does no network I/O.
//
// Metrics. The meter provider always has a Prometheus reader whose registry
// is returned in [Telemetry.Registry] (serve it with
// [Telemetry.MetricsHandler]). OTEL_METRICS_EXPORTER picks an additional push
// exporter by the same rules as traces ("prometheus" means just the pull
// reader; this package never opens a port of its own).
//
// OTEL_SDK_DISABLED=true disables every exporter; metrics are still recorded
// in-process (and served on /metrics), and spans are sampled as without an
// exporter.
//
// Propagation is W3C tracecontext + W3C baggage. Unless [WithoutGlobals] is
// given, Setup installs the providers and the propagator as the otel globals
// (instrumentation libraries read them); the returned Telemetry lets your own
// code avoid the globals.
func Setup(ctx context.Context, serviceName string, opts ...Option) (*Telemetry, error) {
	cfg := setupConfig{globals: true}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if serviceName == "" && os.Getenv(envServiceName) == "" {
		return nil, fmt.Errorf("%w: empty service name and %s unset", ErrInvalidConfig, envServiceName)
	}
	disabled := strings.EqualFold(strings.TrimSpace(os.Getenv(envSDKDisabled)), "true")
	if cfg.sampler == nil {
		if err := checkSamplerEnv(); err != nil {
			return nil, err
		}
	}

	res, err := newResource(ctx, serviceName, cfg.resourceAttrs)
	if err != nil {
		return nil, err
	}

	tel := &Telemetry{
		Resource:   res,
		Propagator: NewPropagator(),
	}

	// Traces.
	var spanExps []sdktrace.SpanExporter
	closeExporters := func() {
		for _, e := range spanExps {
			_ = e.Shutdown(ctx)
		}
	}
	if !disabled {
		var names []string
		spanExps, names, err = newSpanExporters(ctx)
		if err != nil {
			return nil, err
		}
		tel.TracesExporter = strings.Join(names, ",")
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	tel.RecordsSpans = true
	switch {
	case cfg.sampler != nil:
		tpOpts = append(tpOpts, sdktrace.WithSampler(cfg.sampler))
	case len(spanExps) == 0 && len(cfg.processors) == 0 && envLower(envTracesSampler) == "":
		// Nothing here reads a recorded span: roots carry ids only, but a
		// sampled parent stays sampled for the services downstream (see Setup).
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
		tel.RecordsSpans = false
	}
	if !cfg.noCorrelation {
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(CorrelationProcessor()))
	}
	for _, e := range spanExps {
		tpOpts = append(tpOpts, sdktrace.WithBatcher(e))
	}
	for _, p := range cfg.processors {
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(p))
	}

	// Metrics.
	reg := cfg.registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(
			collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		)
	}
	promReader, err := newPrometheusReader(reg)
	if err != nil {
		closeExporters()
		return nil, err
	}
	mpOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(promReader), sdkmetric.WithView(httpServerView)}
	if !disabled {
		readers, names, err := newMetricReaders(ctx)
		if err != nil {
			closeExporters()
			return nil, err
		}
		for _, r := range readers {
			mpOpts = append(mpOpts, sdkmetric.WithReader(r))
		}
		tel.MetricsExporter = strings.Join(names, ",")
	}
	for _, r := range cfg.readers {
		mpOpts = append(mpOpts, sdkmetric.WithReader(r))
	}

	tel.TracerProvider = sdktrace.NewTracerProvider(tpOpts...)
	tel.MeterProvider = sdkmetric.NewMeterProvider(mpOpts...)
	tel.Registry = reg

	if cfg.globals {
		otel.SetTracerProvider(tel.TracerProvider)
		otel.SetMeterProvider(tel.MeterProvider)
		otel.SetTextMapPropagator(tel.Propagator)
		otel.SetErrorHandler(newErrorLog(cfg.errorLogger))
	}
	return tel, nil
}

// checkSamplerEnv rejects OTEL_TRACES_SAMPLER values the SDK would report
// through the otel error handler and then silently replace with the default
// sampler: a typo there should stop the deploy, not sample 100%.
func checkSamplerEnv() error {
	name := envLower(envTracesSampler)
	arg := strings.TrimSpace(os.Getenv(envTracesSamplerArg))
	switch name {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
		return nil
	case "traceidratio", "parentbased_traceidratio":
		if arg == "" {
			return nil // the SDK's default ratio is 1
		}
		if r, err := strconv.ParseFloat(arg, 64); err != nil || r < 0 || r > 1 {
			return fmt.Errorf("%w: %s=%q is not a ratio in [0, 1]", ErrInvalidConfig, envTracesSamplerArg, arg)
		}
		return nil
	default:
		return fmt.Errorf("%w: %s=%q (want always_on, always_off, traceidratio or their parentbased_ forms)",
			ErrInvalidConfig, envTracesSampler, name)
	}
}

// NewPropagator returns the propagator choreo uses on every hop: W3C
// tracecontext (traceparent, tracestate) and W3C baggage.
func NewPropagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// defaultPropagator is what this package injects and extracts with when the caller
// chose no propagator: the otel global one, unless the global one is still otel's
// default no-op (it carries no fields), in which case W3C trace context + baggage
// ([NewPropagator]). So an embedder who never called [Setup] still passes the upstream
// trace context on to every event a handler enqueues: with no SDK the spans do not
// record, but each keeps its parent's span context, so the trace id and parent travel on.
func defaultPropagator() propagation.TextMapPropagator {
	if p := otel.GetTextMapPropagator(); len(p.Fields()) > 0 {
		return p
	}
	return w3c
}

// w3c is the fallback of defaultPropagator; propagators are stateless values.
var w3c = NewPropagator()

func newResource(ctx context.Context, serviceName string, extra []attribute.KeyValue) (*resource.Resource, error) {
	attrs := make([]attribute.KeyValue, 0, len(extra)+1)
	if serviceName != "" {
		attrs = append(attrs, semconv.ServiceName(serviceName))
	}
	attrs = append(attrs, extra...)
	// Later options win: code-given attributes first, then the environment.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithProcessPID(),
		resource.WithProcessRuntimeName(),
		resource.WithProcessRuntimeVersion(),
		resource.WithAttributes(attrs...),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, fmt.Errorf("%w: resource: %w", ErrInvalidConfig, err)
	}
	// A partial resource (e.g. a malformed OTEL_RESOURCE_ATTRIBUTES entry or
	// an unreadable hostname) still describes the service; keep it.
	return res, nil
}

func envLower(key string) string {
	return strings.ToLower(strings.TrimSpace(os.Getenv(key)))
}

func otlpProtocol(signalKey string) string {
	if p := envLower(signalKey); p != "" {
		return p
	}
	if p := envLower(envOTLPProtocol); p != "" {
		return p
	}
	return defaultOTLPProtocolName
}

// exporterNames returns the exporters named by envKey (a comma-separated
// list, as the OTel spec allows), or ["otlp"] when it is unset and an OTLP
// endpoint is configured, or nothing. "none" means nothing and cannot be
// combined with other names.
func exporterNames(envKey, signalEndpointKey string) ([]string, error) {
	v := envLower(envKey)
	if v == "" {
		if os.Getenv(envOTLPEndpoint) == "" && os.Getenv(signalEndpointKey) == "" {
			return nil, nil
		}
		return []string{"otlp"}, nil
	}
	var names []string
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if slices.Contains(names, "none") {
		if len(names) > 1 {
			return nil, fmt.Errorf("%w: %s=%q combines none with exporters", ErrInvalidConfig, envKey, v)
		}
		return nil, nil
	}
	return names, nil
}

// newSpanExporters applies the rules documented on Setup and returns the
// exporters with their names ("otlp/grpc", "otlp/http/protobuf", "console").
// The OTLP exporters read their own OTEL_EXPORTER_OTLP_* settings (endpoint,
// headers, TLS, timeout, compression).
func newSpanExporters(ctx context.Context) (exps []sdktrace.SpanExporter, names []string, err error) {
	list, err := exporterNames(envTracesExporter, envOTLPTracesEndpoint)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			for _, e := range exps {
				_ = e.Shutdown(ctx)
			}
			exps, names = nil, nil
		}
	}()
	for _, name := range list {
		var exp sdktrace.SpanExporter
		switch name {
		case "console":
			exp, err = stdouttrace.New(stdouttrace.WithPrettyPrint())
		case "otlp":
			proto := otlpProtocol(envOTLPTracesProtocol)
			switch proto {
			case "grpc":
				exp, err = otlptracegrpc.New(ctx)
			case "http/protobuf":
				exp, err = otlptracehttp.New(ctx)
			default:
				return exps, names, fmt.Errorf("%w: OTLP protocol %q for traces (want grpc or http/protobuf)", ErrInvalidConfig, proto)
			}
			name = "otlp/" + proto
		default:
			return exps, names, fmt.Errorf("%w: %s: unknown exporter %q (want otlp, console or none)", ErrInvalidConfig, envTracesExporter, name)
		}
		if err != nil {
			return exps, names, fmt.Errorf("%w: traces exporter %s: %w", ErrInvalidConfig, name, err)
		}
		exps, names = append(exps, exp), append(names, name)
	}
	return exps, names, nil
}

// newMetricReaders returns the push readers chosen by OTEL_METRICS_EXPORTER
// ("prometheus" is served by the pull reader every Telemetry has). The
// periodic readers honour OTEL_METRIC_EXPORT_INTERVAL and _TIMEOUT.
func newMetricReaders(ctx context.Context) (readers []sdkmetric.Reader, names []string, err error) {
	list, err := exporterNames(envMetricsExporter, envOTLPMetricsEndpoint)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			for _, r := range readers {
				_ = r.Shutdown(ctx)
			}
			readers, names = nil, nil
		}
	}()
	for _, name := range list {
		var exp sdkmetric.Exporter
		switch name {
		case "prometheus":
			continue
		case "console":
			exp, err = stdoutmetric.New()
		case "otlp":
			proto := otlpProtocol(envOTLPMetricsProtocol)
			switch proto {
			case "grpc":
				exp, err = otlpmetricgrpc.New(ctx)
			case "http/protobuf":
				exp, err = otlpmetrichttp.New(ctx)
			default:
				return readers, names, fmt.Errorf("%w: OTLP protocol %q for metrics (want grpc or http/protobuf)", ErrInvalidConfig, proto)
			}
			name = "otlp/" + proto
		default:
			return readers, names, fmt.Errorf("%w: %s: unknown exporter %q (want otlp, prometheus, console or none)", ErrInvalidConfig, envMetricsExporter, name)
		}
		if err != nil {
			return readers, names, fmt.Errorf("%w: metrics exporter %s: %w", ErrInvalidConfig, name, err)
		}
		readers, names = append(readers, sdkmetric.NewPeriodicReader(exp)), append(names, name)
	}
	return readers, names, nil
}

// httpServerView drops server.address and server.port from the HTTP server metrics
// (otelhttp's http.server.*): otelhttp takes them from the request's Host header, so
// any client could make a new series per request (and keep it until a restart). A
// process knows its own address; the metrics keep method, route, status and scheme.
var httpServerView = sdkmetric.NewView(
	sdkmetric.Instrument{Name: "http.server.*"},
	sdkmetric.Stream{AttributeFilter: attribute.NewDenyKeysFilter("server.address", "server.port")},
)
