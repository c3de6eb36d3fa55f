package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/admission"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/tracing"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// runHTTPApp runs an App listening on HTTP_ADDR and ADMIN_ADDR (both 127.0.0.1:0) with
// limits and opts, and a POST /echo route reading its body and a GET /slow route that
// waits for its deadline, plus the routes that register adds. It returns the public and
// admin base URLs.
func runHTTPApp(t *testing.T, limits app.HTTPLimits, opts []app.Option, register ...func(*app.App)) (string, string) {
	t.Helper()
	_, ns := testenv.Redis(t)
	env := app.MapEnv(map[string]string{
		"DATABASE_URL": freshDSN(t), "REDIS_ADDR": testenv.RedisAddr(t),
		"KAFKA_BROKERS": strings.Join(testenv.KafkaCluster(t).ListenAddrs(), ","),
		"HTTP_ADDR":     "127.0.0.1:0",
	})
	cfg := app.LoadConfig(env, "widget", ":8080")
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	if cfg.AdminAddr != "127.0.0.1:0" {
		t.Fatalf("default AdminAddr %q for HTTP_ADDR 127.0.0.1:0", cfg.AdminAddr)
	}
	a, err := app.New(context.Background(), cfg.Service, append([]app.Option{app.WithConfig(cfg), app.WithoutSignals(), app.WithLogOutput(io.Discard),
		app.WithLockOptions(lock.WithNamespace(ns)), app.WithHTTPLimits(limits)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	a.HandleHTTPFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read: "+err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write(b)
	})
	a.HandleHTTPFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	for _, f := range register {
		f(a)
	}
	return runApp(t, a), "http://" + a.AdminAddr()
}

// runApp runs a until the test ends and returns its public base URL once it is ready.
func runApp(t *testing.T, a *app.App) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	base := "http://" + a.Addr()
	apptest.WaitReady(t, base)
	return base
}

// TestAdminListener: /metrics and the details of /readyz are served only on the admin
// listener; the public one answers /healthz and /readyz with the status alone.
func TestAdminListener(t *testing.T) {
	base, admin := runHTTPApp(t, app.HTTPLimits{}, nil)
	if code, _ := get(t, base+"/metrics"); code != http.StatusNotFound {
		t.Errorf("public /metrics: %d, want 404", code)
	}
	code, body := get(t, base+"/readyz")
	if code != http.StatusOK || strings.TrimSpace(body) != `{"status":"ok"}` {
		t.Errorf("public /readyz: %d %s", code, body)
	}
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("public /healthz: %d", code)
	}
	if code, body := get(t, admin+"/metrics"); code != http.StatusOK || !strings.Contains(body, "# TYPE") {
		t.Errorf("admin /metrics: %d", code)
	}
	code, body = get(t, admin+"/readyz")
	var ready struct{ Checks map[string]string }
	if err := json.Unmarshal([]byte(body), &ready); code != http.StatusOK || err != nil || ready.Checks["postgres"] != "ok" {
		t.Errorf("admin /readyz: %d %s", code, body)
	}
	if code, _ := get(t, admin+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("admin /debug/pprof/ without PPROF: %d, want 404", code)
	}
	if code, _ := get(t, admin+"/echo"); code != http.StatusNotFound {
		t.Errorf("admin serves the routes: %d", code)
	}
}

// readClosed reads from c until the server closes it, and returns what it read; it
// fails t if that takes longer than within.
func readClosed(t *testing.T, c net.Conn, within time.Duration) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(within))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("connection still open after %v (read %q)", within, b)
	}
	return string(b)
}

// TestHTTPLimits: a client that stops in its headers or its body is cut off, oversized
// headers get 431, a request past its deadline gets 503, and connections beyond MaxConns
// wait until one closes.
func TestHTTPLimits(t *testing.T) {
	limits := app.HTTPLimits{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 600 * time.Millisecond,
		RequestTimeout: 400 * time.Millisecond, WriteTimeout: time.Second, MaxHeaderBytes: 4 << 10, MaxConns: 3}
	base, _ := runHTTPApp(t, limits, nil)
	host := strings.TrimPrefix(base, "http://")
	dial := func() net.Conn {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	slowHeaders := dial()
	_, _ = io.WriteString(slowHeaders, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
	readClosed(t, slowHeaders, 10*time.Second)

	slowBody := dial()
	_, _ = io.WriteString(slowBody, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n0123456789")
	if got := readClosed(t, slowBody, 10*time.Second); strings.Contains(got, "200 OK") {
		t.Errorf("slow body answered %q", got)
	}

	req, _ := http.NewRequest("GET", base+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 8<<10))
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("oversized headers: %d, want 431", resp.StatusCode)
	}

	start := time.Now()
	if code, _ := get(t, base+"/slow"); code != http.StatusServiceUnavailable {
		t.Errorf("request past its deadline: %d, want 503", code)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("deadline took %v", d)
	}

}

// TestHTTPMaxConns: with MaxConns 1, a connection holding the slot (serving a request
// whose body is unfinished) keeps a second one from being served until it closes.
func TestHTTPMaxConns(t *testing.T) {
	base, _ := runHTTPApp(t, app.HTTPLimits{MaxConns: 1}, nil)
	host := strings.TrimPrefix(base, "http://")
	holder, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	// The server answers 100 Continue once the handler reads the body: the connection is
	// then serving a request, not an unfinished one that a newcomer could evict.
	_, _ = io.WriteString(holder, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n")
	if line, err := bufio.NewReader(holder).ReadString('\n'); err != nil || !strings.Contains(line, "100 Continue") {
		t.Fatalf("holder: %q, %v", line, err)
	}
	second, err := net.Dial("tcp", host) // the kernel completes the handshake; Go does not accept it
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	_, _ = io.WriteString(second, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	_ = second.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := second.Read(make([]byte, 1)); n > 0 || err == nil {
		t.Fatal("second connection served while the first held the only slot")
	}
	holder.Close()
	_ = second.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(second), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("second connection after the slot freed: %v", err)
	}
	resp.Body.Close()
}

func TestRequireBearer(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h := app.RequireBearer("t0ken", ok)
	for _, tc := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong", 401}, {"Bearer t0ken2", 401}, {"Basic t0ken", 401}, {"t0ken", 401}, {"Bearer t0ken", 204}} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/orders", nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want || (tc.want == 401 && rec.Header().Get("WWW-Authenticate") == "") {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, rec.Code, tc.want)
		}
	}
	if app.RequireBearer("", ok) == nil {
		t.Error("RequireBearer with no token returned nil")
	}
}

// TestRouteAdmission: on a route under WithRouteAdmission, a request shed at the cap is
// answered 503 with Retry-After and {"error":{"code":"overloaded"}}, counted in
// http.server.shed_requests, and has no server span; the admitted ones have their span
// and their deadline (503 "timeout" past it).
func TestRouteAdmission(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	hold := make(chan struct{})
	entered := make(chan struct{}, 1)
	var adm *admission.Limiter
	base, admin := runHTTPApp(t, app.HTTPLimits{RequestTimeout: 400 * time.Millisecond},
		[]app.Option{app.WithTracingOptions(tracing.WithSpanProcessor(rec))},
		func(a *app.App) {
			var err error
			if adm, err = admission.New(1, admission.WithMeterProvider(a.Telemetry.MeterProvider)); err != nil {
				t.Fatal(err)
			}
			a.HandleHTTPFunc("GET /held", func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				select {
				case <-hold:
				case <-r.Context().Done():
				}
			}, app.WithRouteAdmission(adm))
			a.HandleHTTPFunc("GET /past-deadline", func(w http.ResponseWriter, r *http.Request) {
				<-r.Context().Done()
			}, app.WithRouteAdmission(adm))
		})
	errorCode := func(body string) string {
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &e)
		return e.Error.Code
	}

	if code, body := get(t, base+"/past-deadline"); code != http.StatusServiceUnavailable || errorCode(body) != "timeout" {
		t.Fatalf("admitted request past its deadline: %d %q, want 503 timeout", code, body)
	}

	first := make(chan int, 1)
	go func() {
		code, _ := get(t, base+"/held")
		first <- code
	}()
	<-entered
	resp, err := http.Get(base + "/held")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || errorCode(string(body)) != "overloaded" {
		t.Fatalf("at the cap: %d, Retry-After %q, %q; want 503, 1, overloaded", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	close(hold)
	if code := <-first; code != http.StatusOK {
		t.Fatalf("held request: %d, want 200", code)
	}
	if adm.Shed() != 1 {
		t.Fatalf("Shed() = %d, want 1", adm.Shed())
	}

	spans := map[string]int{}
	for _, s := range rec.Ended() {
		spans[s.Name()]++
	}
	if spans["GET /held"] != 1 || spans["GET /past-deadline"] != 1 {
		t.Fatalf("server spans %v, want one per admitted request (GET /held 1, GET /past-deadline 1)", spans)
	}
	_, metrics := get(t, admin+"/metrics")
	shed := ""
	for line := range strings.Lines(metrics) {
		if strings.HasPrefix(line, "http_server_shed_requests_total") {
			shed = strings.TrimSpace(line)
		}
	}
	if !strings.HasSuffix(shed, " 1") {
		t.Fatalf("shed counter %q, want 1", shed)
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:8080": true, "localhost:8080": true, "127.0.0.2:1": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.5:8080": false,
		"example.com:80": false, "garbage": false,
	} {
		if got := app.Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// openIdle opens n keep-alive connections to host, makes one GET /healthz on each and
// leaves them open and idle.
func openIdle(t *testing.T, host string, n int) {
	t.Helper()
	for i := range n {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		go func() { // an evicted connection fails its read: that is the point
			_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				resp.Body.Close()
			}
		}()
	}
}

// TestHTTPIdleConnectionFlood: 1,024 idle keep-alive connections from one client (the
// default MaxConns) do not keep /readyz or an API call from being answered: one
// client holds at most MaxConnsPerClient connections, and when the server is full a
// new connection closes the longest-idle one. Before either, both waited for the
// idle timeout (2 minutes).
func TestHTTPIdleConnectionFlood(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits app.HTTPLimits
		flood  int
	}{
		{"per-client cap", app.HTTPLimits{}, app.DefaultMaxConns},
		{"idle eviction when full", app.HTTPLimits{MaxConns: 64, MaxConnsPerClient: -1}, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, _ := runHTTPApp(t, tc.limits, nil)
			openIdle(t, strings.TrimPrefix(base, "http://"), tc.flood)
			// Answers come long before the idle timeout, or the client gives up.
			hc := &http.Client{Timeout: app.DefaultIdleTimeout / 4}
			for _, path := range []string{"/readyz", "/healthz"} {
				resp, err := hc.Get(base + path)
				if err != nil {
					t.Fatalf("GET %s behind %d idle connections: %v", path, tc.flood, err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("GET %s: %d", path, resp.StatusCode)
				}
			}
			req, _ := http.NewRequest("POST", base+"/echo", strings.NewReader("hi"))
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("POST /echo behind %d idle connections: %v", tc.flood, err)
			}
			resp.Body.Close()
		})
	}
}
