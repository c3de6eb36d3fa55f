package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/app"
)

// TestOrderToken: with ORDER_API_TOKEN (or -order-token) sagactl sends the bearer token
// the order API requires; without it the API's refusal is reported.
func TestOrderToken(t *testing.T) {
	const token = "0rder-T0ken"
	srv := httptest.NewServer(app.RequireBearer(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"orders":[]}`))
	})))
	defer srv.Close()
	run1 := func(env map[string]string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append(args, "-order-url", srv.URL),
			stdio{out: &out, err: &errb, getenv: func(k string) string { return env[k] }})
		return code, out.String() + errb.String()
	}
	if code, out := run1(map[string]string{"ORDER_API_TOKEN": token}, "stuck"); code != exitOK {
		t.Errorf("token from the environment: exit %d: %s", code, out)
	}
	if code, out := run1(nil, "stuck", "-order-token", token); code != exitOK {
		t.Errorf("token from the flag: exit %d: %s", code, out)
	}
	code, out := run1(nil, "stuck")
	if code == exitOK || !strings.Contains(out, "401") && !strings.Contains(strings.ToLower(out), "unauthorized") {
		t.Errorf("no token: exit %d: %s", code, out)
	}
}
