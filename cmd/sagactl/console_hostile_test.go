package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeMetrics serves Prometheus text with one outbox backlog behind the bearer token.
func fakeMetrics(t *testing.T, token string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "choreo_outbox_backlog{table=\"outbox\"} 7\nchoreo_outbox_leader{table=\"outbox\"} 1\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestConsoleMetricsToken: the console reaches a service's /metrics behind ADMIN_TOKEN
// with the token from its environment (or -metrics-token); before, its outbox section
// showed "HTTP 401".
func TestConsoleMetricsToken(t *testing.T) {
	const token = "adm1n-t0ken"
	metrics := fakeMetrics(t, token)
	var cancels atomic.Int32
	orderURL := fakeOrderAPI(t, &cancels).URL
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"ADMIN_TOKEN", nil, map[string]string{"ADMIN_TOKEN": token}},
		{"-metrics-token", []string{"-metrics-token", token}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var out, errb syncBuffer
			done := make(chan int, 1)
			args := append([]string{"console", "-addr", "127.0.0.1:0", "-brokers", "127.0.0.1:1", "-order-url", orderURL,
				"-metrics", "order=" + metrics.URL + "/metrics"}, tc.args...)
			go func() {
				done <- run(ctx, args, stdio{out: &out, err: &errb, getenv: func(k string) string { return tc.env[k] }})
			}()
			t.Cleanup(func() { cancel(); <-done })
			base := waitServing(t, &out, &errb, done)
			resp, err := http.Get(base + "/api/overview")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var ov overview
			if err := json.NewDecoder(resp.Body).Decode(&ov); err != nil {
				t.Fatal(err)
			}
			if len(ov.Outbox) != 1 || ov.Outbox[0].Error != "" || ov.Outbox[0].Rows != 7 || !ov.Outbox[0].Leader {
				t.Fatalf("outbox %+v, want 7 rows read with the token", ov.Outbox)
			}
		})
	}

	// Without the token the section says what is missing.
	c := conn{orderURL: orderURL, brokers: "127.0.0.1:1", timeout: 10 * time.Second}
	s, err := newConsole(c, []metricsTarget{{Service: "order", URL: metrics.URL + "/metrics"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	rows, err := s.scrapeOutbox(context.Background(), s.targets[0])
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "ADMIN_TOKEN") {
		t.Fatalf("without the token: %v %+v, want a 401 naming ADMIN_TOKEN", err, rows)
	}
}

// waitServing returns the console's base URL once it says it serves.
func waitServing(t *testing.T, out, errb *syncBuffer, done chan int) string {
	t.Helper()
	re := regexp.MustCompile(`serving (http://[^/ ]+)/`)
	deadline := time.After(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		select {
		case code := <-done:
			done <- code // for the cleanup
			t.Fatalf("console exited %d: %s", code, errb.String())
		case <-deadline:
			t.Fatalf("console did not start: %s", errb.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// hostileOrderAPI answers like the order service for one order whose texts carry bidi
// overrides, isolates, zero-width and other format characters.
func hostileOrderAPI(t *testing.T) *httptest.Server {
	t.Helper()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o := Order{ID: "o-1", CustomerID: "c-\u202egnp.exe", State: "PENDING", Stuck: true, CreatedAt: at, StateSince: at,
		Reason: "declined\u2066 hidden\u2069\u200b", History: []Transition{
			{To: "PENDING", CauseEventType: "command.create\u061c", At: at, Note: "note \u202dLTR\u202c \ufeff\u2028"},
		}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) { _ = json.NewEncoder(w).Encode(o) })
	mux.HandleFunc("GET /orders/counts", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"by_state":{"PENDING":1},"stuck":{"PENDING":1}}`)
	})
	mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"orders": []Order{o}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// hasFormatChar reports whether s holds a character the console must escape.
func hasFormatChar(s string) bool {
	for _, r := range s {
		if r != '\n' && r != '\r' && r != '\t' && unsafeRune(r) {
			return true
		}
	}
	return false
}

// TestConsoleEscapesFormatCharacters: U+202E and the other bidi and format characters
// of the order API's texts reach neither the order page nor the overview's JSON (whose
// values the page writes with textContent) as they are: both show them as \uNNNN.
func TestConsoleEscapesFormatCharacters(t *testing.T) {
	h := newTestConsole(t, hostileOrderAPI(t).URL)
	page := consoleGet(t, h, "/orders/o-1")
	if page.Code != http.StatusOK {
		t.Fatalf("order page: %d %s", page.Code, page.Body)
	}
	body := page.Body.String()
	if hasFormatChar(body) {
		t.Errorf("the order page holds a format character as it is")
	}
	for _, want := range []string{`c-\u202egnp.exe`, `\u2066 hidden\u2069\u200b`, `\u202dLTR\u202c \ufeff\u2028`} {
		if !strings.Contains(body, want) {
			t.Errorf("the order page lacks %q", want)
		}
	}
	ov := consoleGet(t, h, "/api/overview")
	var decoded overview
	if err := json.Unmarshal(ov.Body.Bytes(), &decoded); err != nil {
		t.Fatalf("overview: %v %s", err, ov.Body)
	}
	if len(decoded.Stuck) != 1 || decoded.Stuck[0].Customer != `c-\u202egnp.exe` {
		t.Errorf("overview's stuck order %+v, want the customer id escaped", decoded.Stuck)
	}
	if hasFormatChar(ov.Body.String()) {
		t.Errorf("the overview JSON holds a format character as it is")
	}
}

// TestConsoleNoticeCodes: a page shows only the notices the console set itself (the
// codes its redirects carry); any other ?notice= text is dropped, so a link cannot make
// the console say "your session expired, log in at evil.example".
func TestConsoleNoticeCodes(t *testing.T) {
	var cancels atomic.Int32
	h := newTestConsole(t, fakeOrderAPI(t, &cancels).URL)
	const lure = "session expired: log in again at https://evil.example/login"
	page := consoleGet(t, h, "/orders/o-1?notice="+url.QueryEscape(lure))
	if body := page.Body.String(); strings.Contains(body, "evil.example") || strings.Contains(body, `id="notice"`) {
		t.Errorf("the page shows the notice of a link")
	}
	page = consoleGet(t, h, "/orders/o-1?notice=cancel-requested")
	if !strings.Contains(page.Body.String(), "cancellation requested") {
		t.Errorf("the page lacks the cancel notice")
	}

	// The cancel's redirect carries a code, never text of the order API.
	var cookie *http.Cookie
	for _, c := range page.Result().Cookies() {
		if c.Name == csrfCookie {
			cookie = c
		}
	}
	rec := consolePost(t, h, "/orders/o-1/cancel", url.Values{"csrf": formValues(page.Body.String(), "csrf")}, cookie)
	if loc := rec.Header().Get("Location"); rec.Code != http.StatusSeeOther || loc != "/orders/o-1?notice=cancel-requested" {
		t.Errorf("cancel: %d to %q", rec.Code, loc)
	}
}

// TestConsoleRedactsMetricsQuery: a secret in the query string of a -metrics URL (or its
// user:password) is shown by neither the overview nor an error: query values read
// "redacted".
func TestConsoleRedactsMetricsQuery(t *testing.T) {
	for raw, want := range map[string]string{
		"http://127.0.0.1:9080/metrics?token=hunter2":                     "http://127.0.0.1:9080/metrics?token=redacted",
		"http://ops:hunter2@127.0.0.1:9080/metrics?a=1&api_key=hunter2#x": "http://127.0.0.1:9080/metrics?a=redacted&api_key=redacted",
		"http://127.0.0.1:9080/metrics?hunter2":                           "http://127.0.0.1:9080/metrics?redacted",
		"http://127.0.0.1:9080/metrics?x=%zzhunter2&&y":                   "http://127.0.0.1:9080/metrics?x=redacted&&redacted",
	} {
		if got := redactURL(raw); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", raw, got, want)
		}
	}
	var cancels atomic.Int32
	c := conn{orderURL: fakeOrderAPI(t, &cancels).URL, brokers: "127.0.0.1:1", timeout: 10 * time.Second}
	s, err := newConsole(c, []metricsTarget{{Service: "order", URL: "http://127.0.0.1:1/metrics?token=hunter2"},
		{Service: "payment", URL: fakeMetrics(t, "other").URL + "/metrics?token=hunter2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	rec := consoleGet(t, s.handler(), "/api/overview")
	if body := rec.Body.String(); strings.Contains(body, "hunter2") || !strings.Contains(body, "token=redacted") {
		t.Errorf("/api/overview shows the query's secret or no error: %s", body)
	}
	if _, err := parseMetricsTargets("order=ftp://127.0.0.1/metrics?token=hunter2"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("a bad -metrics entry: %v", err)
	}
}
