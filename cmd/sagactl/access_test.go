package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestConsoleRefusesPublicWithoutToken: listening beyond loopback without an access
// token is refused before anything is served.
func TestConsoleRefusesPublicWithoutToken(t *testing.T) {
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, []string{"console", "-addr", "0.0.0.0:0", "-brokers", "127.0.0.1:1"},
		stdio{out: &out, err: &errb, getenv: func(string) string { return "" }})
	if code != exitUsage || !strings.Contains(errb.String(), "access token") || strings.Contains(out.String(), "serving") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want a usage error naming the access token", code, out.String(), errb.String())
	}
}

// TestConsoleToken: with a token, every request needs it (HTTP Basic password or
// bearer), and the Host check still holds (DNS rebinding), also with the token.
func TestConsoleToken(t *testing.T) {
	var cancels atomic.Int32
	c := conn{orderURL: fakeOrderAPI(t, &cancels).URL, brokers: "127.0.0.1:1", timeout: 10 * time.Second}
	s, err := newConsole(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	s.token = "s3cret"
	s.hosts["ops.example"] = true
	h := s.handler()
	for _, tc := range []struct {
		name, host string
		auth       func(r *http.Request)
		want       int
	}{
		{"no token", "127.0.0.1:8090", func(*http.Request) {}, http.StatusUnauthorized},
		{"wrong password", "127.0.0.1:8090", func(r *http.Request) { r.SetBasicAuth("ops", "nope") }, http.StatusUnauthorized},
		{"basic", "127.0.0.1:8090", func(r *http.Request) { r.SetBasicAuth("ops", "s3cret") }, http.StatusOK},
		{"bearer", "10.1.2.3:8090", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") }, http.StatusOK},
		{"named host", "ops.example:8090", func(r *http.Request) { r.SetBasicAuth("", "s3cret") }, http.StatusOK},
		{"rebound host with token", "evil.example:8090", func(r *http.Request) { r.SetBasicAuth("ops", "s3cret") }, http.StatusMisdirectedRequest},
	} {
		req := httptest.NewRequest(http.MethodGet, "http://"+tc.host+"/api/overview", nil)
		tc.auth(req)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, rec.Code, tc.want)
		}
		if tc.want == http.StatusUnauthorized && !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Basic") {
			t.Errorf("%s: no Basic challenge", tc.name)
		}
	}
}

// TestRedactURL: user:password never appears in what sagactl prints or serves about a
// URL given with credentials.
func TestRedactURL(t *testing.T) {
	if got := redactURL("http://ops:hunter2@orders.internal:8080/x"); got != "http://orders.internal:8080/x" {
		t.Errorf("redactURL = %q", got)
	}
	c := conn{orderURL: "http://ops:hunter2@127.0.0.1:1", brokers: "127.0.0.1:1", timeout: 2 * time.Second}
	api, err := c.orderAPI()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Get(context.Background(), "o-1"); err == nil || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "ops@") {
		t.Errorf("order API error %v shows the credentials", err)
	}
	s, err := newConsole(c, []metricsTarget{{Service: "order", URL: "http://ops:hunter2@127.0.0.1:1/metrics"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	rec := consoleGet(t, s.handler(), "/api/overview")
	if body := rec.Body.String(); strings.Contains(body, "hunter2") || strings.Contains(body, "ops@") || !strings.Contains(body, "127.0.0.1:1") {
		t.Errorf("/api/overview shows the credentials or no error: %s", body)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"order", "-order-url", "http://ops:hunter2@127.0.0.1:1", "o-1"},
		stdio{out: &out, err: &errb, getenv: func(string) string { return "" }})
	if code == 0 || strings.Contains(out.String()+errb.String(), "hunter2") || strings.Contains(out.String()+errb.String(), "ops@") {
		t.Errorf("sagactl order: exit %d, output %q %q", code, out.String(), errb.String())
	}
}
