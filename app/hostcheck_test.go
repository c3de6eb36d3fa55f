package app_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
)

func TestRequireHost(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h := app.RequireHost([]string{"orders.example.com", ".svc.cluster.local"}, ok)
	for host, want := range map[string]int{
		"127.0.0.1:8080": 204, "127.0.0.2": 204, "[::1]:8080": 204, "10.1.2.3:8080": 204, "[2001:db8::1]:80": 204,
		"localhost:8080": 204, "LocalHost": 204, "localhost.:8080": 204, "console.localhost:8080": 204,
		"orders.example.com:443": 204, "ORDERS.example.com.": 204, "order.default.svc.cluster.local:8080": 204, "": 204,
		"rebind.evil.example:8080": 421, "orders.example.com.evil.example": 421, "svc.cluster.local": 421,
		"localhost.evil.example": 421, "example.com": 421, "127.0.0.1.nip.io": 421,
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/orders", nil)
		req.Host = host
		h.ServeHTTP(rec, req)
		if rec.Code != want || (want == 421 && !strings.Contains(rec.Body.String(), "HTTP_ALLOWED_HOSTS")) {
			t.Errorf("Host %q: %d %s, want %d", host, rec.Code, rec.Body, want)
		}
	}
	any := app.RequireHost([]string{"*"}, ok)
	req := httptest.NewRequest("GET", "/", nil)
	req.Host = "rebind.evil.example"
	rec := httptest.NewRecorder()
	if any.ServeHTTP(rec, req); rec.Code != http.StatusNoContent {
		t.Errorf("HTTP_ALLOWED_HOSTS=*: %d", rec.Code)
	}
}

// TestHTTPHostCheck: both listeners of a running App answer 421 to a Host of another
// site (DNS rebinding of /metrics, /readyz's details and the routes) and answer loopback
// names, IP addresses and the names of HTTP_ALLOWED_HOSTS.
func TestHTTPHostCheck(t *testing.T) {
	base, admin := runHTTPApp(t, app.HTTPLimits{}, nil)
	for _, url := range []string{base + "/healthz", base + "/readyz", admin + "/metrics", admin + "/readyz"} {
		req, _ := http.NewRequest("GET", url, nil)
		req.Host = "rebind.evil.example"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("GET %s for rebind.evil.example: %d, want 421", url, resp.StatusCode)
		}
		req.Host = "localhost"
		if resp, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s for localhost: %d, want 200", url, resp.StatusCode)
		}
	}
}

func TestAllowedHostsConfig(t *testing.T) {
	env := app.MapEnv(map[string]string{"HTTP_ALLOWED_HOSTS": "orders.example.com, .svc.cluster.local"})
	if c := app.LoadConfig(env, "widget", ":8080"); env.Err() != nil || len(c.AllowedHosts) != 2 || c.AllowedHosts[1] != ".svc.cluster.local" {
		t.Fatalf("allowed hosts %q, %v", c.AllowedHosts, env.Err())
	}
	if c := app.LoadConfig(app.MapEnv(nil), "widget", ":8080"); len(c.AllowedHosts) != 0 {
		t.Fatalf("default allowed hosts %q, want none", c.AllowedHosts)
	}
	for _, bad := range []string{"orders.example.com:8080", "http://orders.example.com", "."} {
		env := app.MapEnv(map[string]string{"HTTP_ALLOWED_HOSTS": bad})
		app.LoadConfig(env, "widget", ":8080")
		apptest.WantConfigError(t, env, "HTTP_ALLOWED_HOSTS")
	}
}
