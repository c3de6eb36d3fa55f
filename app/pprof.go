package app

import (
	"net/http"
	"net/http/pprof"
	"time"
)

// handlePprof adds net/http/pprof's endpoints under /debug/pprof/ to mux (the admin
// listener's, when Config.Pprof is set): the index and named profiles (heap, mutex,
// block, goroutine, ...), cmdline, profile (CPU, ?seconds=N), symbol and trace, each
// under the request deadline timeout and behind the bearer token (none when empty).
func handlePprof(mux *http.ServeMux, timeout time.Duration, token string) {
	for pattern, h := range map[string]http.HandlerFunc{
		"/debug/pprof/":        pprof.Index,
		"/debug/pprof/cmdline": pprof.Cmdline,
		"/debug/pprof/profile": pprof.Profile,
		"/debug/pprof/symbol":  pprof.Symbol,
		"/debug/pprof/trace":   pprof.Trace,
	} {
		mux.Handle(pattern, RequireBearer(token, withRequestTimeout(h, timeout)))
	}
}
