package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeOrderAPI answers like the order service for one hostile order: its texts carry
// markup, its Jaeger URL is a javascript: link. It counts cancel requests.
func fakeOrderAPI(t *testing.T, cancels *atomic.Int32) *httptest.Server {
	t.Helper()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o := Order{ID: "o-1", CustomerID: `<script>alert("c")</script>`, State: "PENDING", Stuck: true,
		CreatedAt: at, StateSince: at, TraceID: "abc", JaegerURL: "javascript:alert(1)",
		History: []Transition{
			{To: "PENDING", CauseEventType: "command.create", At: at},
			{From: "PENDING", To: "PENDING", CauseEventType: "payment.authorized", At: at.Add(1500 * time.Millisecond), Ignored: true, Note: `<img src=x onerror=alert(2)>`},
		}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != o.ID {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"code":"not_found","message":"order not found"}}`)
			return
		}
		_ = json.NewEncoder(w).Encode(o)
	})
	mux.HandleFunc("POST /orders/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		cancels.Add(1)
		c := o
		c.State = "CANCELLING"
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(c)
	})
	mux.HandleFunc("GET /orders/counts", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"by_state":{"PENDING":1,"CONFIRMED":4},"stuck":{"PENDING":1,"CANCELLING":0}}`)
	})
	mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"orders": []Order{o}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func newTestConsole(t *testing.T, orderURL string) http.Handler {
	t.Helper()
	c := conn{orderURL: orderURL, brokers: "127.0.0.1:1", timeout: 2 * time.Second, kafkaSec: kafkaSecFlags{}}
	s, err := newConsole(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s.handler()
}

func consoleGet(t *testing.T, h http.Handler, path string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8090"+path, nil)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestConsoleOrderPageEscapesAndSecures(t *testing.T) {
	var cancels atomic.Int32
	h := newTestConsole(t, fakeOrderAPI(t, &cancels).URL)
	rec := consoleGet(t, h, "/orders/o-1")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	body := rec.Body.String()
	for _, bad := range []string{`<script>alert`, `<img src=x`, `javascript:alert`} {
		if strings.Contains(body, bad) {
			t.Errorf("page contains %q unescaped", bad)
		}
	}
	for _, want := range []string{`&lt;script&gt;alert(&#34;c&#34;)&lt;/script&gt;`, `&lt;img src=x onerror=alert(2)&gt;`,
		`<svg id="timeline"`, `id="stuck-flag"`, `id="cancel-button"`, `&#43;1.5s`, `name="csrf" value="`} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
	hd := rec.Header()
	if csp := hd.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	if hd.Get("X-Frame-Options") != "DENY" || hd.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers %v", hd)
	}
	if rec := consoleGet(t, h, "/orders/nope"); rec.Code != http.StatusNotFound {
		t.Errorf("unknown order: status %d", rec.Code)
	}
}

func TestConsoleCSRF(t *testing.T) {
	var cancels atomic.Int32
	h := newTestConsole(t, fakeOrderAPI(t, &cancels).URL)
	page := consoleGet(t, h, "/orders/o-1")
	var cookie *http.Cookie
	for _, c := range page.Result().Cookies() {
		if c.Name == csrfCookie {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("csrf cookie %+v", cookie)
	}
	body := page.Body.String()
	i := strings.Index(body, `name="csrf" value="`)
	token, _, _ := strings.Cut(body[i+len(`name="csrf" value="`):], `"`)

	post := func(form url.Values, c *http.Cookie, hdr map[string]string) int {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8090/orders/o-1/cancel", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		if c != nil {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	other := &http.Cookie{Name: csrfCookie, Value: strings.Repeat("A", 43)}
	tests := []struct {
		name   string
		form   url.Values
		cookie *http.Cookie
		hdr    map[string]string
		status int
	}{
		{"no token", url.Values{}, cookie, nil, http.StatusForbidden},
		{"no cookie", url.Values{"csrf": {token}}, nil, nil, http.StatusForbidden},
		{"token of another cookie", url.Values{"csrf": {token}}, other, nil, http.StatusForbidden},
		{"forged token", url.Values{"csrf": {"x" + token[1:]}}, cookie, nil, http.StatusForbidden},
		{"cross-site", url.Values{"csrf": {token}}, cookie, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"valid", url.Values{"csrf": {token}}, cookie, map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusSeeOther},
	}
	for _, tt := range tests {
		if got := post(tt.form, tt.cookie, tt.hdr); got != tt.status {
			t.Errorf("%s: status %d, want %d", tt.name, got, tt.status)
		}
	}
	if n := cancels.Load(); n != 1 {
		t.Errorf("the order API saw %d cancels, want 1 (the valid POST)", n)
	}
	// A console on loopback answers only to loopback host names (DNS rebinding).
	req := httptest.NewRequest(http.MethodGet, "http://evil.example:8090/", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusMisdirectedRequest {
		t.Errorf("Host evil.example: status %d", rec.Code)
	}
}

func TestConsoleOverviewJSON(t *testing.T) {
	var cancels atomic.Int32
	h := newTestConsole(t, fakeOrderAPI(t, &cancels).URL)
	rec := consoleGet(t, h, "/api/overview")
	var ov overview
	if err := json.Unmarshal(rec.Body.Bytes(), &ov); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("status %d, %v: %s", rec.Code, err, rec.Body)
	}
	if len(ov.States) < 6 || ov.States[0] != (stateCount{State: "PENDING", Count: 1, Stuck: 1}) || ov.States[2].Count != 4 {
		t.Errorf("states %+v", ov.States)
	}
	if len(ov.Stuck) != 1 || ov.Stuck[0].ID != "o-1" || ov.Stuck[0].JaegerURL != "" {
		t.Errorf("stuck %+v (a javascript: link must be dropped)", ov.Stuck)
	}
	// No broker at 127.0.0.1:1: those sections carry the error, the others still show.
	if ov.DeadLettersError == "" || ov.LagError == "" {
		t.Errorf("broker errors missing: %+v", ov)
	}
}

func TestParseProm(t *testing.T) {
	text := `# HELP choreo_outbox_backlog rows waiting
# TYPE choreo_outbox_backlog gauge
choreo_outbox_backlog{otel_scope_name="outbox",table="outbox"} 12
choreo_outbox_oldest_age_seconds{table="outbox"} 0.25
choreo_outbox_leader{table="a \"quoted\" \\ name"} 1
choreo_outbox_published_total{table="outbox"} 99
other_metric 3
choreo_outbox_backlog{broken 4
`
	got, err := parseProm(strings.NewReader(text), promOutboxBacklog, promOutboxOldest, promOutboxLeader)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("samples %+v", got)
	}
	if got[0].name != "choreo_outbox_backlog" || got[0].value != 12 || got[0].labels["table"] != "outbox" {
		t.Errorf("backlog %+v", got[0])
	}
	if got[1].value != 0.25 || got[2].labels["table"] != `a "quoted" \ name` {
		t.Errorf("samples %+v", got[1:])
	}
}

func TestBuildTimeline(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tl := buildTimeline([]Transition{
		{To: "PENDING", CauseEventType: "command.create", At: at},
		{From: "PENDING", To: "PENDING", CauseEventType: "payment.authorized", At: at.Add(time.Second)},
		{From: "PENDING", To: "CONFIRMED", CauseEventType: "stock.reserved", At: at.Add(time.Second + 40*time.Millisecond)},
	})
	if len(tl.Lanes) != 3 || len(tl.Steps) != 3 {
		t.Fatalf("%+v", tl)
	}
	lanes := []string{tl.Steps[0].Lane, tl.Steps[1].Lane, tl.Steps[2].Lane}
	if strings.Join(lanes, ",") != "order,payment,inventory" {
		t.Errorf("lanes %v", lanes)
	}
	if tl.Steps[0].Arrow || !tl.Steps[2].Arrow || tl.Steps[2].Delta != "+40ms" || tl.Steps[1].Delta != "+1.0s" {
		t.Errorf("steps %+v", tl.Steps)
	}
	if tl.Steps[2].X <= tl.Steps[1].X || tl.Width < tl.Steps[2].X {
		t.Errorf("layout %+v", tl)
	}
}
