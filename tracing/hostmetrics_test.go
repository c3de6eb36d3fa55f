package tracing_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/choreo-saga/choreo/tracing"
)

// TestHTTPServerMetricsIgnoreHost: requests with 50 different Host headers (any
// client picks its own) add no series to the HTTP server metrics; otelhttp would
// otherwise record each as its own server.address and server.port.
func TestHTTPServerMetricsIgnoreHost(t *testing.T) {
	cleanEnv(t)
	reader := sdkmetric.NewManualReader()
	tel := setup(t, tracing.WithMetricReader(reader))
	h := otelhttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}), "GET /healthz",
		otelhttp.WithMeterProvider(tel.MeterProvider), otelhttp.WithTracerProvider(tel.TracerProvider))
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", h)
	for i := range 50 {
		r := httptest.NewRequest(http.MethodGet, "/healthz", nil)
		r.Host = fmt.Sprintf("evil-%d.example:%d", i, 1000+i)
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "http.server.request.duration" {
				continue
			}
			found = true
			hist, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				t.Fatalf("%s is a %T", m.Name, m.Data)
			}
			if len(hist.DataPoints) != 1 {
				t.Errorf("%d series for one route and status, want 1", len(hist.DataPoints))
			}
			for _, dp := range hist.DataPoints {
				for _, k := range []string{"server.address", "server.port"} {
					if v, ok := dp.Attributes.Value(attribute.Key(k)); ok {
						t.Errorf("series carries %s=%v", k, v.Emit())
					}
				}
			}
		}
	}
	if !found {
		t.Fatal("no http.server.request.duration recorded")
	}
}
