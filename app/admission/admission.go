// Package admission is load shedding for an HTTP API: a cap on the requests served at
// once, the excess answered at once with 503 and Retry-After. app.WithRouteAdmission puts
// a route of the kit under a Limiter.
package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// ErrInvalidConfig is matched (errors.Is) by New's configuration errors. Retrying does
// not help: fix the configuration.
var ErrInvalidConfig = errors.New("admission: invalid configuration")

// Defaults of [New].
const (
	// defaultRetryAfter is the Retry-After a shed request is answered with.
	defaultRetryAfter = time.Second
	// defaultShedLogInterval is the least time between two "shedding" log lines.
	defaultShedLogInterval = 10 * time.Second
)

// Limiter is load shedding for an HTTP API: at most max requests are served at once,
// and one that arrives when all are taken is answered at once with 503 Service
// Unavailable, a Retry-After header and {"error":{"code":"overloaded",...}}, without
// reaching the handler (so it did nothing: a POST may be retried with the same
// Idempotency-Key). Above saturation, queueing every request (for a database pool,
// say) only makes every request late; shedding the excess keeps the admitted ones
// at capacity.
//
//	adm, err := admission.New(64, admission.WithMeterProvider(a.Telemetry.MeterProvider))
//	a.HandleHTTP("POST /orders", h, app.WithRouteAdmission(adm))
//
// It records the counter http.server.shed_requests and the gauge
// http.server.in_flight_requests, and logs at most one warning per
// defaultShedLogInterval while it sheds. Safe for concurrent use.
//
// Under app.App.HandleHTTP with app.WithRouteAdmission it is the route's outermost layer: a shed
// request is refused before the request deadline (a timer and a context) and otelhttp's
// server span and metrics exist, because
// above saturation most requests are shed (~1,100 of 1,600 POSTs/s in bench/saga) and
// each refusal should cost as little as possible. So a shed request has no span and is
// not in http.server.request.duration; it is counted by http.server.shed_requests only,
// and the admitted ones are traced and measured as without admission control.
// app's BenchmarkShedRequest measures the difference (docs/benchmarks.md).
type Limiter struct {
	max        int64
	inFlight   atomic.Int64
	shed       atomic.Int64
	lastLog    atomic.Int64
	retryAfter string
	logEvery   time.Duration
	logger     *slog.Logger
	shedCount  metric.Int64Counter
}

// Option configures [New].
// An invalid value makes New return an error matching [ErrInvalidConfig].
type Option func(*config) error

type config struct {
	retryAfter time.Duration
	logEvery   time.Duration
	logger     *slog.Logger
	mp         metric.MeterProvider
}

// WithRetryAfter sets the Retry-After of a shed request (rounded up to whole
// seconds). Default: defaultRetryAfter.
func WithRetryAfter(d time.Duration) Option {
	return func(o *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: Retry-After %s is not positive", ErrInvalidConfig, d)
		}
		o.retryAfter = d
		return nil
	}
}

// WithLogger sets the logger of the rate-limited shedding warning, and its
// interval (0 means defaultShedLogInterval). Default: no log.
func WithLogger(l *slog.Logger, every time.Duration) Option {
	return func(o *config) error {
		switch {
		case l == nil:
			return fmt.Errorf("%w: nil logger", ErrInvalidConfig)
		case every < 0:
			return fmt.Errorf("%w: log interval %s is negative", ErrInvalidConfig, every)
		case every == 0:
			every = defaultShedLogInterval
		}
		o.logger, o.logEvery = l, every
		return nil
	}
}

// WithMeterProvider sets the meter provider of the metrics. Default: none.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *config) error {
		if mp == nil {
			return fmt.Errorf("%w: nil meter provider", ErrInvalidConfig)
		}
		o.mp = mp
		return nil
	}
}

// New returns admission control admitting at most max requests at once;
// max 0 means unlimited (Wrap returns its handler unchanged). A negative max or a
// non-positive Retry-After is an error matching ErrInvalidConfig.
func New(max int, opts ...Option) (*Limiter, error) {
	o := config{retryAfter: defaultRetryAfter, logEvery: defaultShedLogInterval}
	if max < 0 {
		return nil, fmt.Errorf("%w: max in flight %d is negative", ErrInvalidConfig, max)
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.mp == nil {
		o.mp = noop.NewMeterProvider()
	}
	a := &Limiter{
		max:        int64(max),
		retryAfter: strconv.Itoa(int((o.retryAfter + time.Second - 1) / time.Second)),
		logEvery:   o.logEvery,
		logger:     o.logger,
	}
	meter := o.mp.Meter("github.com/choreo-saga/choreo/app")
	var err error
	if a.shedCount, err = meter.Int64Counter("http.server.shed_requests",
		metric.WithDescription("Requests answered 503 by admission control because the in-flight cap was reached.")); err != nil {
		return nil, fmt.Errorf("admission: metrics: %w", err)
	}
	if _, err = meter.Int64ObservableGauge("http.server.in_flight_requests",
		metric.WithDescription("Requests being served under admission control."),
		metric.WithInt64Callback(func(_ context.Context, obs metric.Int64Observer) error {
			obs.Observe(a.inFlight.Load())
			return nil
		})); err != nil {
		return nil, fmt.Errorf("admission: metrics: %w", err)
	}
	return a, nil
}

// Max returns the cap (0: unlimited).
func (a *Limiter) Max() int { return int(a.max) }

// InFlight returns the number of requests being served.
func (a *Limiter) InFlight() int { return int(a.inFlight.Load()) }

// Shed returns how many requests have been shed since the Limiter was created.
func (a *Limiter) Shed() int64 { return a.shed.Load() }

// Wrap returns h under admission control.
func (a *Limiter) Wrap(h http.Handler) http.Handler {
	if a.max == 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.inFlight.Add(1) > a.max {
			a.inFlight.Add(-1)
			a.reject(w, r)
			return
		}
		defer a.inFlight.Add(-1)
		h.ServeHTTP(w, r)
	})
}

func (a *Limiter) reject(w http.ResponseWriter, r *http.Request) {
	n := a.shed.Add(1)
	a.shedCount.Add(r.Context(), 1)
	if a.logger != nil {
		now := time.Now().UnixNano()
		last := a.lastLog.Load()
		if now-last >= int64(a.logEvery) && a.lastLog.CompareAndSwap(last, now) {
			a.logger.WarnContext(r.Context(), "http: shedding load: in-flight cap reached",
				"max_in_flight", a.max, "shed_total", n, "method", r.Method, "path", r.URL.Path)
		}
	}
	writeOverloaded(w, a.retryAfter)
}

// WriteOverloaded answers a request that is shed by a check of its own (a service's
// domain-level limit, say) exactly as a [Limiter] does: 503 Service Unavailable, a
// Retry-After of retryAfter rounded up to whole seconds (at least 1), and
// {"error":{"code":"overloaded",...}}.
func WriteOverloaded(w http.ResponseWriter, retryAfter time.Duration) {
	writeOverloaded(w, strconv.Itoa(max(1, int((retryAfter+time.Second-1)/time.Second))))
}

func writeOverloaded(w http.ResponseWriter, retryAfter string) {
	w.Header().Set("Retry-After", retryAfter)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`{"error":{"code":"overloaded","message":"the service is at capacity; retry after the Retry-After delay with the same Idempotency-Key"}}` + "\n"))
}
