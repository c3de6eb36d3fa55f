package tracing_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/choreo-saga/choreo/tracing"
)

// otelEnv lists every variable Setup, the SDK or the exporters read that the
// tests set; cleanEnv blanks them so the machine's environment cannot leak in.
var otelEnv = []string{
	"OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_RESOURCE_ATTRIBUTES",
}

func cleanEnv(t *testing.T, kv ...string) {
	t.Helper()
	for _, k := range otelEnv {
		t.Setenv(k, "")
	}
	for i := 0; i < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

func setup(t *testing.T, opts ...tracing.Option) *tracing.Telemetry {
	t.Helper()
	tel, err := tracing.Setup(context.Background(), "svc", append([]tracing.Option{tracing.WithoutGlobals()}, opts...)...)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		// Nothing these tests check needs a flush; a cancelled context keeps
		// exporters pointed at absent collectors from retrying.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = tel.Shutdown(ctx)
	})
	return tel
}

// Without an endpoint nothing is exported and spans are not recorded, yet
// they get real ids so logs and headers still correlate, and Shutdown has
// nothing to wait for.
func TestSetupWithoutEndpointExportsNothing(t *testing.T) {
	cleanEnv(t)
	tel := setup(t)
	if tel.TracesExporter != "" || tel.MetricsExporter != "" || tel.RecordsSpans {
		t.Fatalf("exporters = %q/%q, records spans %v, want none", tel.TracesExporter, tel.MetricsExporter, tel.RecordsSpans)
	}
	_, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "op")
	if sc := span.SpanContext(); !sc.IsValid() || sc.IsSampled() || span.IsRecording() {
		t.Fatalf("span context %v, recording %v: want valid, unsampled, not recording", sc, span.IsRecording())
	}
	span.End()
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

func TestSetupExporterSelection(t *testing.T) {
	tests := []struct {
		name        string
		env         []string
		wantTraces  string
		wantMetrics string
	}{
		{"nothing set", nil, "", ""},
		{"endpoint, default protocol", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, "otlp/http/protobuf", "otlp/http/protobuf"},
		{"endpoint, grpc", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, "otlp/grpc", "otlp/grpc"},
		{"traces-only endpoint and protocol", []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4317/", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"}, "otlp/grpc", ""},
		{"explicit otlp without endpoint", []string{"OTEL_TRACES_EXPORTER", "otlp"}, "otlp/http/protobuf", ""},
		{"none wins over endpoint", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER", "none", "OTEL_METRICS_EXPORTER", "none"}, "", ""},
		{"console", []string{"OTEL_TRACES_EXPORTER", "console"}, "console", ""},
		{"list", []string{"OTEL_TRACES_EXPORTER", "otlp, console,otlp", "OTEL_METRICS_EXPORTER", "prometheus,otlp"}, "otlp/http/protobuf,console", "otlp/http/protobuf"},
		{"prometheus metrics is the pull reader", []string{"OTEL_METRICS_EXPORTER", "prometheus", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, "otlp/http/protobuf", ""},
		{"sdk disabled", []string{"OTEL_SDK_DISABLED", "true", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cleanEnv(t, tt.env...)
			tel := setup(t)
			if tel.TracesExporter != tt.wantTraces || tel.MetricsExporter != tt.wantMetrics {
				t.Fatalf("exporters = %q/%q, want %q/%q", tel.TracesExporter, tel.MetricsExporter, tt.wantTraces, tt.wantMetrics)
			}
		})
	}
}

func TestSetupRejectsInvalidConfig(t *testing.T) {
	tests := []struct {
		name    string
		service string
		env     []string
	}{
		{"no service name", "", nil},
		{"unknown traces exporter", "svc", []string{"OTEL_TRACES_EXPORTER", "zipkin"}},
		{"unknown metrics exporter", "svc", []string{"OTEL_METRICS_EXPORTER", "statsd"}},
		{"none combined with an exporter", "svc", []string{"OTEL_TRACES_EXPORTER", "none,otlp"}},
		{"unknown exporter in a list", "svc", []string{"OTEL_TRACES_EXPORTER", "otlp,jaeger"}},
		{"unknown sampler", "svc", []string{"OTEL_TRACES_SAMPLER", "always_onn"}},
		{"sampler ratio out of range", "svc", []string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "1.5"}},
		{"unsupported protocol", "svc", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cleanEnv(t, tt.env...)
			tel, err := tracing.Setup(context.Background(), tt.service, tracing.WithoutGlobals())
			if !errors.Is(err, tracing.ErrInvalidConfig) {
				if tel != nil {
					_ = tel.Shutdown(context.Background())
				}
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
	t.Run("service name from env", func(t *testing.T) {
		cleanEnv(t, "OTEL_SERVICE_NAME", "from-env")
		tel, err := tracing.Setup(context.Background(), "", tracing.WithoutGlobals())
		if err != nil {
			t.Fatal(err)
		}
		defer tel.Shutdown(context.Background())
		if got := resourceValue(tel, semconv.ServiceNameKey); got != "from-env" {
			t.Fatalf("service.name = %q", got)
		}
	})
}

func resourceValue(tel *tracing.Telemetry, key attribute.Key) string {
	v, _ := tel.Resource.Set().Value(key)
	return v.Emit()
}

func TestSetupResourceFromEnv(t *testing.T) {
	cleanEnv(t,
		"OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=ci,service.version=9.9",
		"OTEL_SERVICE_NAME", "renamed-by-operator",
	)
	tel := setup(t, tracing.WithResourceAttributes(semconv.ServiceVersion("1.0"), attribute.String("team", "saga")))
	for key, want := range map[attribute.Key]string{
		semconv.ServiceNameKey:        "renamed-by-operator", // env beats code
		semconv.ServiceVersionKey:     "9.9",
		"deployment.environment.name": "ci",
		"team":                        "saga",
		semconv.TelemetrySDKNameKey:   "opentelemetry",
	} {
		if got := resourceValue(tel, key); got != want {
			t.Errorf("resource %s = %q, want %q", key, got, want)
		}
	}
}

func TestSetupSamplerFromEnv(t *testing.T) {
	tests := []struct {
		env         []string
		wantSampled bool
	}{
		{nil, false}, // no exporter: ids only
		{[]string{"OTEL_TRACES_SAMPLER", "parentbased_always_on"}, true},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp"}, true},
		{[]string{"OTEL_TRACES_SAMPLER", "always_off"}, false},
		{[]string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0"}, false},
		{[]string{"OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "1"}, true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.env, "="), func(t *testing.T) {
			cleanEnv(t, tt.env...)
			tel := setup(t)
			_, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "op")
			recording := span.IsRecording()
			span.End()
			if got := span.SpanContext().IsSampled(); got != tt.wantSampled || recording != tt.wantSampled {
				t.Fatalf("sampled = %v, recording = %v, want %v", got, recording, tt.wantSampled)
			}
			if tel.RecordsSpans != tt.wantSampled && tt.env == nil {
				t.Fatalf("RecordsSpans = %v", tel.RecordsSpans)
			}
		})
	}
}

func TestSetupSetsGlobalsUnlessAsked(t *testing.T) {
	cleanEnv(t)
	// The other tests pass providers explicitly; only the propagator global
	// (set by TestMain) matters to them, and Setup installs an equal one.
	tel, err := tracing.Setup(context.Background(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	if otel.GetTracerProvider() != tel.TracerProvider || otel.GetMeterProvider() != tel.MeterProvider {
		t.Fatal("Setup did not install its providers as the otel globals")
	}
	fields := otel.GetTextMapPropagator().Fields()
	if slices.Sort(fields); strings.Join(fields, ",") != "baggage,traceparent,tracestate" {
		t.Fatalf("global propagator fields = %q", fields)
	}

	setup(t) // WithoutGlobals
	if otel.GetTracerProvider() != tel.TracerProvider || otel.GetMeterProvider() != tel.MeterProvider {
		t.Fatal("WithoutGlobals replaced the global providers")
	}
}

func TestMetricsHandlerServesOTelAndRuntimeMetrics(t *testing.T) {
	cleanEnv(t)
	tel := setup(t)
	c, err := tel.MeterProvider.Meter("t").Int64Counter("choreo.test.events")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3, metric.WithAttributes(attribute.String("outcome", "handled")))

	srv := httptest.NewServer(tel.MetricsHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`outcome="handled"} 3`,
		"choreo_test_events_total{",
		`service_name="svc"`, // target_info
		"go_goroutines ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

// otlpReceiver is a minimal OTLP collector (HTTP and gRPC) that keeps what it
// receives.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu      sync.Mutex
	spans   []*tracepb.ResourceSpans
	metrics int // number of metric export requests
}

func (o *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.spans = append(o.spans, req.GetResourceSpans()...)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var resp proto.Message
	switch r.URL.Path {
	case "/v1/traces":
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = o.Export(r.Context(), &req)
		resp = &coltracepb.ExportTraceServiceResponse{}
	case "/v1/metrics":
		var req colmetricpb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		o.metrics++
		o.mu.Unlock()
		resp = &colmetricpb.ExportMetricsServiceResponse{}
	default:
		http.NotFound(w, r)
		return
	}
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// received returns the exported spans by name with their resource's
// service.name.
func (o *otlpReceiver) received() map[string]*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]*tracepb.Span{}
	for _, rs := range o.spans {
		svc := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				svc = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				out[svc+"/"+s.GetName()] = s
			}
		}
	}
	return out
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return anyString(kv.GetValue())
		}
	}
	return ""
}

func anyString(v *commonpb.AnyValue) string { return v.GetStringValue() }

// Spans reach a real OTLP endpoint over both transports, with the service
// name and the correlation attributes the processor adds.
func TestSetupExportsOverOTLP(t *testing.T) {
	for _, proto := range []string{"http/protobuf", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			recv := &otlpReceiver{}
			var endpoint string
			if proto == "grpc" {
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				gs := grpc.NewServer()
				coltracepb.RegisterTraceServiceServer(gs, recv)
				go func() { _ = gs.Serve(lis) }()
				t.Cleanup(gs.Stop)
				endpoint = "http://" + lis.Addr().String()
			} else {
				srv := httptest.NewServer(recv)
				t.Cleanup(srv.Close)
				endpoint = srv.URL
			}
			// Metrics go only to the HTTP receiver (the gRPC one serves traces).
			env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT", endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL", proto}
			if proto == "grpc" {
				env = append(env, "OTEL_METRICS_EXPORTER", "none")
			}
			cleanEnv(t, env...)
			tel, err := tracing.Setup(context.Background(), "exporter-test", tracing.WithoutGlobals())
			if err != nil {
				t.Fatal(err)
			}
			ctx := tracing.WithEntity(tracing.WithCorrelationID(context.Background(), "o-9"), "order.id", "o-9")
			ctx, parent := tel.TracerProvider.Tracer("t").Start(ctx, "parent")
			_, child := tel.TracerProvider.Tracer("t").Start(ctx, "child")
			child.End()
			parent.End()
			c, _ := tel.MeterProvider.Meter("t").Int64Counter("exported")
			c.Add(ctx, 1)
			if err := tel.Shutdown(context.Background()); err != nil {
				t.Fatalf("Shutdown (flush): %v", err)
			}

			got := recv.received()
			p, c2 := got["exporter-test/parent"], got["exporter-test/child"]
			if p == nil || c2 == nil {
				t.Fatalf("received spans %v, want parent and child of service exporter-test", keys(got))
			}
			if string(c2.GetParentSpanId()) != string(p.GetSpanId()) || string(c2.GetTraceId()) != string(p.GetTraceId()) {
				t.Fatal("child is not linked to parent in the exported data")
			}
			for _, s := range []*tracepb.Span{p, c2} {
				if spanAttr(s, tracing.AttrCorrelationID) != "o-9" || spanAttr(s, "order.id") != "o-9" {
					t.Fatalf("span %s lacks correlation attributes: %v", s.GetName(), s.GetAttributes())
				}
			}
			if proto == "http/protobuf" {
				recv.mu.Lock()
				n := recv.metrics
				recv.mu.Unlock()
				if n == 0 {
					t.Fatal("no OTLP metrics export received on Shutdown")
				}
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestSetupRefusesNilOptions(t *testing.T) {
	for name, opt := range map[string]tracing.Option{
		"sampler":   tracing.WithSampler(nil),
		"processor": tracing.WithSpanProcessor(nil),
		"reader":    tracing.WithMetricReader(nil),
		"registry":  tracing.WithRegistry(nil),
	} {
		tel, err := tracing.Setup(context.Background(), "svc", tracing.WithoutGlobals(), opt)
		if !errors.Is(err, tracing.ErrInvalidConfig) || tel != nil {
			t.Errorf("%s: Setup = %v, %v; want ErrInvalidConfig", name, tel, err)
		}
	}
}
