package admission_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/app/admission"
	"github.com/choreo-saga/choreo/internal/testenv"
)

func TestNewAdmissionRejectsInvalidConfig(t *testing.T) {
	if _, err := admission.New(-1); !errors.Is(err, admission.ErrInvalidConfig) {
		t.Fatalf("max -1: err = %v, want ErrInvalidConfig", err)
	}
	if _, err := admission.New(1, admission.WithRetryAfter(0)); !errors.Is(err, admission.ErrInvalidConfig) {
		t.Fatalf("Retry-After 0: err = %v, want ErrInvalidConfig", err)
	}
	adm, err := admission.New(0)
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	if got := adm.Wrap(h); got == nil {
		t.Fatal("Wrap returned nil")
	}
}

// TestAdmissionShedsAtCapAndWritesNothing holds the only admitted request inside a
// handler that writes to Postgres by Idempotency-Key, and checks that a second request
// is answered 503 with Retry-After without writing, and that once the load has gone
// the same key is admitted and writes exactly one row.
func TestAdmissionShedsAtCapAndWritesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := testenv.Postgres(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE adm_orders (key text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	adm, err := admission.New(1)
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	entered := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") != "" {
			entered <- struct{}{}
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}
		if _, err := pool.Exec(r.Context(), `INSERT INTO adm_orders (key) VALUES ($1) ON CONFLICT DO NOTHING`,
			r.Header.Get("Idempotency-Key")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	srv := httptest.NewServer(adm.Wrap(h))
	defer srv.Close()
	post := func(key string, holdIt bool) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/orders", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", key)
		if holdIt {
			req.Header.Set("X-Hold", "1")
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	count := func(key string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM adm_orders WHERE key = $1`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	first := make(chan int, 1)
	go func() {
		resp := post("k1", true)
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the first request never reached the handler")
	}

	resp := post("k2", false)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("at cap: status %d, want 503", resp.StatusCode)
	}
	if got := resp.Header.Get("Retry-After"); got != "1" {
		t.Fatalf("Retry-After = %q, want 1", got)
	}
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != "overloaded" {
		t.Fatalf("body %q: err %v, want error code overloaded", body, err)
	}
	if n := count("k2"); n != 0 {
		t.Fatalf("a shed request wrote %d rows", n)
	}
	if adm.Shed() != 1 || adm.InFlight() != 1 {
		t.Fatalf("shed %d in flight %d, want 1 and 1", adm.Shed(), adm.InFlight())
	}

	close(hold)
	if code := <-first; code != http.StatusCreated {
		t.Fatalf("held request: status %d", code)
	}
	for range 2 { // the retry, and a duplicate of it: one row
		resp = post("k2", false)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("after the load went: status %d, want 201", resp.StatusCode)
		}
	}
	if n := count("k2"); n != 1 {
		t.Fatalf("retried key: %d rows, want 1", n)
	}
}
