package app

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRequestDeadline: an answer started before the deadline passes through, even if it
// goes on after it; past the deadline the client gets 503 timeout in place of whatever the
// handler writes (its headers dropped, its writes refused with ErrHandlerTimeout) or of
// no answer at all; a request its client gave up on gets no 503.
func TestRequestDeadline(t *testing.T) {
	const d = 50 * time.Millisecond
	var lateWrite error
	cases := []struct {
		name     string
		h        http.HandlerFunc
		cancel   bool // the client gives up before the handler returns
		wantCode int
		wantBody string
		wantHdr  string // X-Handler expected (empty: must be absent)
	}{
		{name: "answered in time", wantCode: http.StatusCreated, wantBody: "made", wantHdr: "yes",
			h: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Handler", "yes")
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte("made"))
			}},
		{name: "started in time, finished late", wantCode: http.StatusOK, wantBody: "part1part2", wantHdr: "yes",
			h: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Handler", "yes")
				_, _ = w.Write([]byte("part1"))
				<-r.Context().Done()
				_, _ = w.Write([]byte("part2"))
			}},
		{name: "error written after the deadline", wantCode: http.StatusServiceUnavailable, wantBody: `"code":"timeout"`,
			h: func(w http.ResponseWriter, r *http.Request) {
				<-r.Context().Done()
				w.Header().Set("X-Handler", "yes")
				w.WriteHeader(http.StatusInternalServerError)
				_, lateWrite = w.Write([]byte(r.Context().Err().Error()))
			}},
		{name: "no answer by the deadline", wantCode: http.StatusServiceUnavailable, wantBody: `"code":"timeout"`,
			h: func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{name: "client gone", cancel: true, wantCode: http.StatusOK, wantBody: "",
			h: func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lateWrite = nil
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				time.AfterFunc(d/5, cancel)
			}
			rec := httptest.NewRecorder()
			withRequestTimeout(tc.h, d).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
			if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.wantBody) || (tc.wantBody == "" && rec.Body.Len() != 0) {
				t.Fatalf("got %d %q, want %d containing %q", rec.Code, rec.Body.String(), tc.wantCode, tc.wantBody)
			}
			if got := rec.Header().Get("X-Handler"); got != tc.wantHdr {
				t.Errorf("X-Handler %q, want %q", got, tc.wantHdr)
			}
			if tc.wantCode == http.StatusServiceUnavailable {
				if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
				if tc.name == "error written after the deadline" && !errors.Is(lateWrite, http.ErrHandlerTimeout) {
					t.Errorf("late Write returned %v, want ErrHandlerTimeout", lateWrite)
				}
			}
		})
	}
}

// TestRequestDeadlineFlush: Flush reaches the connection's writer, directly and through
// http.ResponseController.
func TestRequestDeadlineFlush(t *testing.T) {
	for _, flush := range []func(http.ResponseWriter) error{
		func(w http.ResponseWriter) error { w.(http.Flusher).Flush(); return nil },
		func(w http.ResponseWriter) error { return http.NewResponseController(w).Flush() },
	} {
		rec := httptest.NewRecorder()
		withRequestTimeout(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("x"))
			if err := flush(w); err != nil {
				t.Errorf("flush: %v", err)
			}
		}), time.Minute).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if !rec.Flushed || rec.Body.String() != "x" {
			t.Errorf("flushed %v, body %q", rec.Flushed, rec.Body.String())
		}
	}
}
