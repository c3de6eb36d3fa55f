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

func newTestConsole(t *testing.T, orderURL string, brokers ...string) http.Handler {
	t.Helper()
	b := "127.0.0.1:1"
	if len(brokers) > 0 {
		b = strings.Join(brokers, ",")
	}
	c := conn{orderURL: orderURL, brokers: b, timeout: 10 * time.Second, kafkaSec: kafkaSecFlags{}}
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
	token := formValues(page.Body.String(), "csrf")[0]

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
	forged := "x" + token[1:] // one character changed (a token that begins with x gets y)
	if forged == token {
		forged = "y" + token[1:]
	}
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
		{"forged token", url.Values{"csrf": {forged}}, cookie, nil, http.StatusForbidden},
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

// formValues returns the values of the hidden inputs called name in an HTML page.
func formValues(body, name string) []string {
	var out []string
	marker := `name="` + name + `" value="`
	for {
		i := strings.Index(body, marker)
		if i < 0 {
			return out
		}
		body = body[i+len(marker):]
		v, _, _ := strings.Cut(body, `"`)
		out = append(out, strings.ReplaceAll(v, "&#43;", "+"))
	}
}

func consolePost(t *testing.T, h http.Handler, path string, form url.Values, cookie *http.Cookie) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8090"+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(cookie)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestConsoleReplay replays dead letters the library's DeadLetter middleware wrote, from
// the dead-letter page: a filtered set as a dry run first (nothing produced), then the
// confirmation, which produces exactly the records the dry run listed, to the retry
// topic of the group that dead-lettered them.
func TestConsoleReplay(t *testing.T) {
	f := newDLQFixture(t)
	h := newTestConsole(t, "http://127.0.0.1:1", f.brokers...)
	list := consoleGet(t, h, "/dlq?topic="+url.QueryEscape(f.dlq)+"&reason=permanent")
	if list.Code != http.StatusOK {
		t.Fatalf("dlq page: %d %s", list.Code, list.Body)
	}
	var cookie *http.Cookie
	for _, c := range list.Result().Cookies() {
		if c.Name == csrfCookie {
			cookie = c
		}
	}
	body := list.Body.String()
	if n := strings.Count(body, `name="rec" value=`); n != 2 || !strings.Contains(body, "2 dead letter(s) match") {
		t.Fatalf("dlq page lists %d records, want the 2 permanent ones:\n%s", n, body)
	}
	token := formValues(body, "csrf")[0]

	dry := consolePost(t, h, "/dlq/replay", url.Values{"csrf": {token}, "all": {"1"}, "topic": {f.dlq},
		"reason": {"permanent"}, "mode": {"preview"}}, cookie)
	refs := formValues(dry.Body.String(), "rec")
	if dry.Code != http.StatusOK || len(refs) != 2 || !strings.Contains(dry.Body.String(), `id="dry-run-note"`) {
		t.Fatalf("dry run: %d, refs %v\n%s", dry.Code, refs, dry.Body)
	}
	if n := endOffsetSum(t, f.brokers, f.source) + endOffsetSum(t, f.brokers, f.retry); n != 3 {
		t.Fatalf("the dry run produced: %s and %s hold %d records, want the 3 originals", f.source, f.retry, n)
	}
	// Only confirmations name their records: a replay of "all" is refused.
	if rec := consolePost(t, h, "/dlq/replay", url.Values{"csrf": {token}, "all": {"1"}, "mode": {"replay"}}, cookie); rec.Code != http.StatusBadRequest {
		t.Errorf("replay of all without a dry run: status %d", rec.Code)
	}
	done := consolePost(t, h, "/dlq/replay", url.Values{"csrf": {token}, "rec": refs, "mode": {"replay"}}, cookie)
	if done.Code != http.StatusOK || !strings.Contains(done.Body.String(), "2 record(s) produced") {
		t.Fatalf("replay: %d\n%s", done.Code, done.Body)
	}
	// To the payment group's retry topic; the source topic, which every group reads,
	// is untouched.
	if n := endOffsetSum(t, f.brokers, f.retry); n != 2 {
		t.Fatalf("%s has %d records after the replay, want 2", f.retry, n)
	}
	if n := endOffsetSum(t, f.brokers, f.source); n != 3 {
		t.Fatalf("%s has %d records after the replay, want its 3 originals", f.source, n)
	}

	_, pos, _ := strings.Cut(refs[0], "|")
	rec := consoleGet(t, h, "/dlq/record?topic="+url.QueryEscape(f.dlq)+"&pos="+url.QueryEscape(pos))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "choreo_dlq_reason") || !strings.Contains(rec.Body.String(), `id="payload"`) {
		t.Errorf("record page: %d\n%s", rec.Code, rec.Body)
	}
	if rec := consoleGet(t, h, "/dlq/record?topic="+url.QueryEscape(f.dlq)+"&pos=0:999"); rec.Code != http.StatusNotFound {
		t.Errorf("record past the end: status %d", rec.Code)
	}
}
