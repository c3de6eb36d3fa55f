package app

import (
	"net/http"
	"net/http/pprof"
)

// handlePprof adds net/http/pprof's endpoints under /debug/pprof/ to mux (the admin
// listener's, when Config.Pprof is set): the index and named profiles (heap, mutex,
// block, goroutine, ...), cmdline, profile (CPU, ?seconds=N), symbol and trace.
func handlePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
