package tracing

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// newPrometheusReader returns an OpenTelemetry metric reader that registers
// itself as a collector in reg, so every instrument of the meter provider it
// is given to appears in reg's exposition (counters get the _total suffix,
// units become name suffixes, per the OTel-Prometheus compatibility spec).
// [Setup] calls it with [Telemetry.Registry]; use it directly when you build
// your own sdkmetric.MeterProvider.
//
// Pass a registry you own, never prometheus.DefaultRegisterer: two meter
// providers registering in one registry collide on the target_info metric.
func newPrometheusReader(reg prometheus.Registerer) (sdkmetric.Reader, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: nil prometheus registerer", ErrInvalidConfig)
	}
	r, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("tracing: prometheus exporter: %w", err)
	}
	return r, nil
}

// prometheusHandler returns the /metrics handler for reg. It negotiates the
// OpenMetrics format, reports scrape errors in the response rather than
// failing the whole scrape, and counts its own requests in reg
// (promhttp_metric_handler_requests_total).
func prometheusHandler(reg *prometheus.Registry) http.Handler {
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:          reg,
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
	return promhttp.InstrumentMetricHandler(reg, h)
}
