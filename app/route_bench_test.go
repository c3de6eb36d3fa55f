package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"syscall"
	"testing"

	"github.com/choreo-saga/choreo/app/admission"
	"github.com/choreo-saga/choreo/tracing"
)

// BenchmarkShedRequest measures the CPU of answering a request that admission control
// sheds, as route builds it (admission first) and behind the request deadline and
// otelhttp's server span and metrics (admission last), with the telemetry a service
// has without an exporter (spans not recorded, metrics recorded). cpu-ns/op is the
// process's CPU time (user + system, every goroutine: the garbage collector included)
// per request, which other load on the machine moves less than ns/op:
//
//	go test -run '^$' -bench ShedRequest -benchmem ./app/
func BenchmarkShedRequest(b *testing.B) {
	tel := benchTelemetry(b)
	adm, err := admission.New(1, admission.WithMeterProvider(tel.MeterProvider))
	if err != nil {
		b.Fatal(err)
	}
	// At the cap: one request held in flight, so that every other is shed.
	release := make(chan struct{})
	defer close(release)
	go adm.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release })).
		ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	for adm.InFlight() < 1 {
		runtime.Gosched()
	}
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { b.Fatal("a shed request reached the handler") })
	const pattern = "POST /orders"
	for _, bc := range []struct {
		name    string
		handler http.Handler
	}{
		{"admission-first", route(tel, pattern, h, defaultRequestTimeout, adm)},
		{"behind-deadline-and-span", withRequestTimeout(serverSpan(tel, pattern, adm.Wrap(h)), defaultRequestTimeout)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			start := cpuTime(b)
			for b.Loop() {
				w := httptest.NewRecorder()
				bc.handler.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/orders", nil))
				if w.Code != http.StatusServiceUnavailable {
					b.Fatalf("status %d, want 503", w.Code)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime returns the process's user + system CPU time in nanoseconds.
func cpuTime(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchTelemetry is the telemetry a service has without an exporter (spans not
// recorded, metrics recorded), shut down when b ends.
func benchTelemetry(b *testing.B) *tracing.Telemetry {
	tel, err := tracing.Setup(context.Background(), "bench", tracing.WithoutGlobals())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel
}
