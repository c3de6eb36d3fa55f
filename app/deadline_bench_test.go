package app

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkRequestDeadline measures the CPU per request of the request deadline over a
// real keep-alive connection, with otelhttp's span inside it as route builds it and a
// handler that decodes and encodes a small JSON body: withRequestTimeout (the handler
// on the connection's goroutine) against http.TimeoutHandler (a goroutine per request,
// its stack grown anew each time, and the answer buffered and copied). cpu-ns/op is the
// process's user + system CPU per request, client included:
//
//	go test -run '^$' -bench RequestDeadline -benchmem ./app/
func BenchmarkRequestDeadline(b *testing.B) {
	tel := benchTelemetry(b)
	type order struct {
		Customer string         `json:"customer"`
		Items    map[string]int `json:"items"`
		Amount   int64          `json:"amount_cents"`
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var o order
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(o)
	})
	body, _ := json.Marshal(order{Customer: "c-42", Items: map[string]int{"sku-1": 2, "sku-7": 1}, Amount: 12_345})
	const pattern = "POST /orders"
	for _, bc := range []struct {
		name    string
		handler http.Handler
	}{
		{"inline", withRequestTimeout(serverSpan(tel, pattern, h), defaultRequestTimeout)},
		{"http.TimeoutHandler", http.TimeoutHandler(serverSpan(tel, pattern, h), defaultRequestTimeout, "timeout")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := httptest.NewServer(bc.handler)
			defer srv.Close()
			client := srv.Client()
			b.ReportAllocs()
			start := cpuTime(b)
			for b.Loop() {
				resp, err := client.Post(srv.URL+"/orders", "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
