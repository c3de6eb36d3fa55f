package app

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestPprofConfig: PPROF turns the profiles on; they are off by default.
func TestPprofConfig(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{envPprof: "1"}, true},
		{map[string]string{envPprof: "false"}, false},
	} {
		env := MapEnv(tc.env)
		if got := LoadConfig(env, "widget", ":8080").Pprof; got != tc.want || env.Err() != nil {
			t.Errorf("%v: Pprof = %v (err %v), want %v", tc.env, got, env.Err(), tc.want)
		}
	}
}

// TestHandlePprof: the index and a named profile answer on the mux they are added to.
func TestHandlePprof(t *testing.T) {
	mux := http.NewServeMux()
	handlePprof(mux, defaultRequestTimeout, "")
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for path, want := range map[string]string{"/debug/pprof/": "goroutine", "/debug/pprof/goroutine?debug=1": "goroutine profile"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d, want 200 with %q", path, resp.StatusCode, want)
		}
	}
}
