package app

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/choreo-saga/choreo/app/admission"
	"github.com/choreo-saga/choreo/tracing"
)

// HandleHTTP registers h for pattern (http.ServeMux syntax, e.g. "POST /orders") on the
// service's HTTP server, with a server span per request (otelhttp) whose parent is the
// caller's traceparent, under the request deadline of HTTPLimits.RequestTimeout.
// /healthz, /readyz and /metrics are taken.
//
// With [WithRouteAdmission], admission control comes first: a request shed by it is
// answered 503 before the deadline's timer and the server span exist, so a refusal
// costs only the answer and the shed counter (http.server.shed_requests); it has no span
// and is not in otelhttp's request metrics.
// The admitted ones are served exactly as without it.
func (a *App) HandleHTTP(pattern string, h http.Handler, opts ...RouteOption) {
	var o routeOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			panic(fmt.Sprintf("app: HandleHTTP(%q): %v", pattern, err))
		}
	}
	a.mux.Handle(pattern, route(a.Telemetry, pattern, h, a.opts.httpLimits.withDefaults().RequestTimeout, o.admission))
}

// route returns the handler of the route pattern: admission control by adm (none if
// nil), then the request deadline timeout, then otelhttp's server span, then h.
func route(tel *tracing.Telemetry, pattern string, h http.Handler, timeout time.Duration, adm *admission.Limiter) http.Handler {
	h = withRequestTimeout(serverSpan(tel, pattern, h), timeout)
	if adm != nil {
		h = adm.Wrap(h)
	}
	return h
}

// serverSpan returns h with otelhttp's server span and request metrics, the span
// named after the request's route pattern.
func serverSpan(tel *tracing.Telemetry, pattern string, h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, pattern,
		otelhttp.WithTracerProvider(tel.TracerProvider),
		otelhttp.WithMeterProvider(tel.MeterProvider),
		otelhttp.WithPropagators(tel.Propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if r.Pattern != "" {
				return r.Pattern
			}
			return r.Method
		}),
	)
}

// RouteOption configures one route of [App.HandleHTTP]. An invalid value is an error
// wrapping [ErrInvalidConfig], and HandleHTTP panics with it.
type RouteOption func(*routeOptions) error

type routeOptions struct {
	admission *admission.Limiter
}

// WithRouteAdmission puts the route under adm (see admission.Limiter), outside its span and
// request deadline. One Admission may cover several routes: they share its cap.
func WithRouteAdmission(adm *admission.Limiter) RouteOption {
	return func(o *routeOptions) error {
		if adm == nil {
			return invalid("WithRouteAdmission: nil admission")
		}
		o.admission = adm
		return nil
	}
}

// HandleHTTPFunc is HandleHTTP for a handler function.
func (a *App) HandleHTTPFunc(pattern string, h func(http.ResponseWriter, *http.Request), opts ...RouteOption) {
	a.HandleHTTP(pattern, http.HandlerFunc(h), opts...)
}

// AddCheck adds a readiness check, reported under name by /readyz next to "postgres",
// "redis" and "kafka".
func (a *App) AddCheck(name string, c func(ctx context.Context) error) {
	a.checks = append(a.checks, namedCheck{name, c})
}

// Addr returns the HTTP server's listen address once Run is listening (useful with
// HTTP_ADDR=127.0.0.1:0), or "" before.
func (a *App) Addr() string {
	if p := a.addr.Load(); p != nil {
		return *p
	}
	return ""
}

// Ready is closed once Run has started every component and serves HTTP.
func (a *App) Ready() <-chan struct{} { return a.ready }

// Handler returns the App's HTTP handler with every endpoint: /healthz, /readyz (with
// each check's error), /metrics and the routes registered with HandleHTTP, each under the
// request deadline (HTTPLimits.RequestTimeout; a route's own, see HandleHTTP). Run serves
// it on one listener only without an admin listener (see Config.AdminAddr); tests may
// call it directly.
func (a *App) Handler() http.Handler {
	mux := a.adminMux(a.opts.httpLimits.withDefaults().RequestTimeout)
	mux.Handle("/", a.mux)
	return mux
}

// adminMux serves the admin endpoints, each under the request deadline timeout:
// /healthz, /readyz with details, /metrics (behind Config.AdminToken).
func (a *App) adminMux(timeout time.Duration) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", withRequestTimeout(healthHandler(), timeout))
	mux.Handle("GET /readyz", withRequestTimeout(readyHandler(readyTimeout, a.gate, a.checks...), timeout))
	mux.Handle("GET /metrics", RequireBearer(a.Config.AdminToken, withRequestTimeout(a.Telemetry.MetricsHandler(), timeout)))
	return mux
}

// publicHandler serves the routes, /healthz and a /readyz that reports only the status,
// for a public listener next to an admin one.
func (a *App) publicHandler() http.Handler {
	timeout := a.opts.httpLimits.withDefaults().RequestTimeout
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", withRequestTimeout(healthHandler(), timeout))
	mux.Handle("GET /readyz", withRequestTimeout(publicReady(readyHandler(readyTimeout, a.gate, a.checks...)), timeout))
	mux.Handle("/", a.mux)
	return mux
}

// AdminAddr returns the admin listener's address once Run is listening, or "" before
// and when the admin endpoints share the public listener.
func (a *App) AdminAddr() string {
	if p := a.adminAddr.Load(); p != nil {
		return *p
	}
	return ""
}

func (a *App) gate() error {
	switch a.state.Load() {
	case stateRunning:
		return nil
	case stateStopping:
		return fmt.Errorf("%w: shutting down", ErrNotReady)
	default:
		return fmt.Errorf("%w: starting", ErrNotReady)
	}
}
