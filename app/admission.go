package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// EnvHTTPMaxInFlight caps the requests an API serves at once (see [Admission]); 0 turns
// admission control off. A service documents its default (the order service: its
// Postgres pool size).
const EnvHTTPMaxInFlight = "HTTP_MAX_IN_FLIGHT"

// Defaults of [NewAdmission].
const (
	// DefaultRetryAfter is the Retry-After a shed request is answered with.
	DefaultRetryAfter = time.Second
	// DefaultShedLogInterval is the least time between two "shedding" log lines.
	DefaultShedLogInterval = 10 * time.Second
)

// ErrAdmission is matched (errors.Is) by NewAdmission's configuration errors. It wraps
// [ErrInvalidConfig].
var ErrAdmission = fmt.Errorf("%w: admission control", ErrInvalidConfig)

// Admission is load shedding for an HTTP API: at most max requests are served at once,
// and one that arrives when all are taken is answered at once with 503 Service
// Unavailable, a Retry-After header and {"error":{"code":"overloaded",...}}, without
// reaching the handler (so it did nothing: a POST may be retried with the same
// Idempotency-Key). Above saturation, queueing every request (for a database pool,
// say) only makes every request late; shedding the excess keeps the admitted ones
// at capacity.
//
//	adm, err := app.NewAdmission(64, app.WithAdmissionMeterProvider(a.Telemetry.MeterProvider))
//	a.HandleHTTP("POST /orders", h, app.WithRouteAdmission(adm))
//
// It records the counter http.server.shed_requests and the gauge
// http.server.in_flight_requests, and logs at most one warning per
// DefaultShedLogInterval while it sheds. Safe for concurrent use.
//
// Under [App.Handle] with [WithRouteAdmission] it is the route's outermost layer: a shed
// request is refused before the request deadline (a timer and a context) and otelhttp's
// server span and metrics exist, because
// above saturation most requests are shed (~1,100 of 1,600 POSTs/s in bench/saga) and
// each refusal should cost as little as possible. So a shed request has no span and is
// not in http.server.request.duration; it is counted by http.server.shed_requests only,
// and the admitted ones are traced and measured as without admission control.
// BenchmarkShedRequest measures the difference (docs/benchmarks.md).
type Admission struct {
	max        int64
	inFlight   atomic.Int64
	shed       atomic.Int64
	lastLog    atomic.Int64
	retryAfter string
	logEvery   time.Duration
	logger     *slog.Logger
	shedCount  metric.Int64Counter
}

// AdmissionOption configures [NewAdmission].
// An invalid value makes NewAdmission return an error matching [ErrAdmission].
type AdmissionOption func(*admissionOptions) error

type admissionOptions struct {
	retryAfter time.Duration
	logEvery   time.Duration
	logger     *slog.Logger
	mp         metric.MeterProvider
}

// WithAdmissionRetryAfter sets the Retry-After of a shed request (rounded up to whole
// seconds). Default: DefaultRetryAfter.
func WithAdmissionRetryAfter(d time.Duration) AdmissionOption {
	return func(o *admissionOptions) error {
		if d <= 0 {
			return fmt.Errorf("%w: Retry-After %s is not positive", ErrAdmission, d)
		}
		o.retryAfter = d
		return nil
	}
}

// WithAdmissionLogger sets the logger of the rate-limited shedding warning, and its
// interval (0 means DefaultShedLogInterval). Default: no log.
func WithAdmissionLogger(l *slog.Logger, every time.Duration) AdmissionOption {
	return func(o *admissionOptions) error {
		switch {
		case l == nil:
			return fmt.Errorf("%w: nil logger", ErrAdmission)
		case every < 0:
			return fmt.Errorf("%w: log interval %s is negative", ErrAdmission, every)
		case every == 0:
			every = DefaultShedLogInterval
		}
		o.logger, o.logEvery = l, every
		return nil
	}
}

// WithAdmissionMeterProvider sets the meter provider of the metrics. Default: none.
func WithAdmissionMeterProvider(mp metric.MeterProvider) AdmissionOption {
	return func(o *admissionOptions) error {
		if mp == nil {
			return fmt.Errorf("%w: nil meter provider", ErrAdmission)
		}
		o.mp = mp
		return nil
	}
}

// NewAdmission returns admission control admitting at most max requests at once;
// max 0 means unlimited (Wrap returns its handler unchanged). A negative max or a
// non-positive Retry-After is an error matching ErrAdmission.
func NewAdmission(max int, opts ...AdmissionOption) (*Admission, error) {
	o := admissionOptions{retryAfter: DefaultRetryAfter, logEvery: DefaultShedLogInterval}
	if max < 0 {
		return nil, fmt.Errorf("%w: max in flight %d is negative", ErrAdmission, max)
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.mp == nil {
		o.mp = noop.NewMeterProvider()
	}
	a := &Admission{
		max:        int64(max),
		retryAfter: strconv.Itoa(int((o.retryAfter + time.Second - 1) / time.Second)),
		logEvery:   o.logEvery,
		logger:     o.logger,
	}
	meter := o.mp.Meter("github.com/choreo-saga/choreo/app")
	var err error
	if a.shedCount, err = meter.Int64Counter("http.server.shed_requests",
		metric.WithDescription("Requests answered 503 by admission control because the in-flight cap was reached.")); err != nil {
		return nil, fmt.Errorf("app: admission metrics: %w", err)
	}
	if _, err = meter.Int64ObservableGauge("http.server.in_flight_requests",
		metric.WithDescription("Requests being served under admission control."),
		metric.WithInt64Callback(func(_ context.Context, obs metric.Int64Observer) error {
			obs.Observe(a.inFlight.Load())
			return nil
		})); err != nil {
		return nil, fmt.Errorf("app: admission metrics: %w", err)
	}
	return a, nil
}

// Max returns the cap (0: unlimited).
func (a *Admission) Max() int { return int(a.max) }

// InFlight returns the number of requests being served.
func (a *Admission) InFlight() int { return int(a.inFlight.Load()) }

// Shed returns how many requests have been shed since the Admission was created.
func (a *Admission) Shed() int64 { return a.shed.Load() }

// Wrap returns h under admission control.
func (a *Admission) Wrap(h http.Handler) http.Handler {
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

func (a *Admission) reject(w http.ResponseWriter, r *http.Request) {
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
// domain-level limit, say) exactly as [Admission] does: 503 Service Unavailable, a
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
