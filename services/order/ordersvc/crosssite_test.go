package ordersvc_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

// TestCrossSiteRequestsChangeNothing: without ORDER_API_TOKEN, no POST route does what a
// page of another site makes a browser send without a CORS preflight: the cancel of
// issue 43 (Content-Type text/plain, Sec-Fetch-Site cross-site) and its variants get
// 403 cross_site or 415, and the order stays PENDING; curl's and sagactl's requests (no
// fetch metadata, no body) and a same-origin page's still work.
func TestCrossSiteRequestsChangeNothing(t *testing.T) {
	f := newFixture(t, ordersvc.Settings{})
	o := f.create(t)
	host := strings.TrimPrefix(f.srv.URL, "http://")
	refused := []struct {
		name, body string
		header     map[string]string
		status     int
		code       string
	}{
		{"text/plain, cross-site (issue 43)", "x", map[string]string{"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site"}, 403, ordersvc.CodeCrossSite},
		{"cross-site without a body", "", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, ordersvc.CodeCrossSite},
		{"same-site", "", map[string]string{"Sec-Fetch-Site": "same-site"}, 403, ordersvc.CodeCrossSite},
		{"cross-site JSON", "{}", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, ordersvc.CodeCrossSite},
		{"another Origin, no fetch metadata (an older browser)", "", map[string]string{"Origin": "http://evil.example"}, 403, ordersvc.CodeCrossSite},
		{"Origin null", "", map[string]string{"Origin": "null"}, 403, ordersvc.CodeCrossSite},
		{"text/plain", "x", map[string]string{"Content-Type": "text/plain"}, 415, ordersvc.CodeInvalidRequest},
		{"a form", "a=b", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, ordersvc.CodeInvalidRequest},
		{"multipart", "--b--", map[string]string{"Content-Type": "multipart/form-data; boundary=b"}, 415, ordersvc.CodeInvalidRequest},
		{"a body without Content-Type", "x", map[string]string{"Content-Type": ""}, 415, ordersvc.CodeInvalidRequest},
	}
	for _, route := range []string{"/orders/" + o.ID + "/cancel", "/orders/" + o.ID + "/retry-compensation", "/orders"} {
		for _, tc := range refused {
			var e ordersvc.ErrorJSON
			resp := f.do(t, "POST", route, tc.body, tc.header, &e)
			if resp.StatusCode != tc.status || e.Error.Code != tc.code {
				t.Errorf("POST %s, %s: %d %q, want %d %q", route, tc.name, resp.StatusCode, e.Error.Code, tc.status, tc.code)
			}
		}
	}
	if got := f.get(t, o.ID); got.State != ordersvc.Pending || len(got.History) != 1 {
		t.Fatalf("after the refused requests: %s with %d transitions, want PENDING with 1", got.State, len(got.History))
	}

	// A same-origin page, and curl or sagactl (neither header, no body), may cancel.
	var c ordersvc.OrderJSON
	if resp := f.do(t, "POST", "/orders/"+o.ID+"/cancel", "{}", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://" + host}, &c); resp.StatusCode != http.StatusAccepted || c.State != ordersvc.Cancelling {
		t.Fatalf("same-origin cancel: %d %s", resp.StatusCode, c.State)
	}
	if resp := f.do(t, "POST", "/orders/"+o.ID+"/cancel", "", nil, &c); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel as curl sends it: %d", resp.StatusCode)
	}
	if resp := f.do(t, "POST", "/orders", validBody, map[string]string{"Origin": "http://" + host}, nil); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create with the page's own Origin: %d", resp.StatusCode)
	}
}

// TestRunRefusesForeignHosts: the running order service, without ORDER_API_TOKEN,
// answers a request whose Host is a name of another site (DNS rebinding: the browser
// sends the attacker's name) with 421, lists and creates nothing for it; loopback names,
// IP addresses and the names of HTTP_ALLOWED_HOSTS are answered.
func TestRunRefusesForeignHosts(t *testing.T) {
	brokers := testenv.Kafka(t)
	_, ns := testenv.Redis(t)
	env := app.MapEnv(map[string]string{
		"DATABASE_URL": testenv.PostgresDSN(t), "REDIS_ADDR": testenv.RedisAddr(t),
		"KAFKA_BROKERS": strings.Join(brokers, ","), "KAFKA_PARTITIONS": "1",
		"HTTP_ALLOWED_HOSTS": "orders.example.test,.svc.example.test",
	})
	cfg := ordersvc.LoadConfig(env)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	base := runService(t, cfg, ns)
	port := base[strings.LastIndex(base, ":")+1:]
	send := func(method, path, host, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, host := range []string{"rebind.evil.example:" + port, "rebind.evil.example", "orders.example.test.evil.example:" + port, "svc.example.test:" + port} {
		for _, r := range []struct{ method, path, body string }{{"GET", "/orders", ""}, {"POST", "/orders", validBody}, {"GET", "/healthz", ""}, {"GET", "/metrics", ""}} {
			if code, body := send(r.method, r.path, host, r.body); code != http.StatusMisdirectedRequest || !strings.Contains(body, `"misdirected"`) {
				t.Errorf("%s %s with Host %s: %d %s, want 421", r.method, r.path, host, code, body)
			}
		}
	}
	code, body := send("GET", "/orders", "127.0.0.1:"+port, "")
	var list ordersvc.ListJSON
	if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil || len(list.Orders) != 0 {
		t.Fatalf("GET /orders after the refused POSTs: %d %s, want no order", code, body)
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST.:" + port, "app.localhost:" + port, "[::1]:" + port,
		"orders.example.test:" + port, "Orders.Example.Test", "order.ns.svc.example.test:" + port} {
		if code, body := send("GET", "/orders", host, ""); code != http.StatusOK {
			t.Errorf("GET /orders with Host %s: %d %s, want 200", host, code, body)
		}
	}
}
