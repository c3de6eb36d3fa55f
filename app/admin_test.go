package app_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// TestAdminPprofBeyondLoopbackConfig: PPROF with ADMIN_ADDR beyond loopback and no
// ADMIN_TOKEN is a configuration error naming both ways out; on loopback or with a token
// it is not.
func TestAdminPprofBeyondLoopbackConfig(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		refused bool
	}{
		{map[string]string{"PPROF": "1", "ADMIN_ADDR": "0.0.0.0:9080"}, true},
		{map[string]string{"PPROF": "1", "ADMIN_ADDR": ":9080"}, true},
		{map[string]string{"PPROF": "1", "ADMIN_ADDR": "10.1.2.3:9080"}, true},
		{map[string]string{"PPROF": "1", "ADMIN_ADDR": "0.0.0.0:9080", "ADMIN_TOKEN": "s3cret"}, false},
		{map[string]string{"PPROF": "1", "ADMIN_ADDR": "127.0.0.1:9080"}, false},
		{map[string]string{"PPROF": "1", "ADMIN_ADDR": "[::1]:9080"}, false},
		{map[string]string{"PPROF": "1"}, false}, // the default ADMIN_ADDR is loopback
		{map[string]string{"ADMIN_ADDR": "0.0.0.0:9080"}, false},
	} {
		env := app.MapEnv(tc.env)
		cfg := app.LoadConfig(env, "widget", ":8080")
		err := env.Err()
		if refused := err != nil; refused != tc.refused {
			t.Errorf("%v: error %v, want refused %v", tc.env, err, tc.refused)
			continue
		}
		if tc.refused && (!strings.Contains(err.Error(), "PPROF") || !strings.Contains(err.Error(), "ADMIN_TOKEN") ||
			!errors.Is(cfg.Validate(), app.ErrInvalidConfig)) {
			t.Errorf("%v: %v; want an invalid-config error naming %s and %s", tc.env, err, "PPROF", "ADMIN_TOKEN")
		}
	}
}

// newAdminApp builds an App on fresh Postgres, Redis and kfake with the variables of env
// on top of loopback HTTP and admin addresses, logging to logs.
func newAdminApp(t *testing.T, env map[string]string, logs io.Writer, opts ...app.Option) *app.App {
	t.Helper()
	_, ns := testenv.Redis(t)
	vars := map[string]string{
		"DATABASE_URL": freshDSN(t), "REDIS_ADDR": testenv.RedisAddr(t),
		"KAFKA_BROKERS": strings.Join(testenv.KafkaCluster(t).ListenAddrs(), ","),
		"HTTP_ADDR":     "127.0.0.1:0",
	}
	for k, v := range env {
		vars[k] = v
	}
	a, err := app.New(context.Background(), "widget", append([]app.Option{app.WithEnv(app.MapEnv(vars)), app.WithoutSignals(),
		app.WithLogOutput(logs), app.WithLockOptions(lock.WithNamespace(ns))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// runAdminApp runs a until the test ends (runApp) and returns the admin listener's base
// URL, dialled on loopback.
func runAdminApp(t *testing.T, a *app.App) string {
	t.Helper()
	runApp(t, a)
	_, port, err := net.SplitHostPort(a.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	return "http://127.0.0.1:" + port
}

// getBearer is get with "Authorization: Bearer token" (none when empty).
func getBearer(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

const metricsWarning = "/metrics is served beyond loopback"

// TestAdminTokenBeyondLoopback: an admin listener on every interface with PPROF and
// ADMIN_TOKEN serves /metrics and the profiles (cmdline included) only with the token,
// and the probes without it; nothing is warned.
func TestAdminTokenBeyondLoopback(t *testing.T) {
	const token = "admin-test-token"
	logs := &apptest.LogBuffer{}
	admin := runAdminApp(t, newAdminApp(t, map[string]string{
		"ADMIN_ADDR": "0.0.0.0:0", "PPROF": "1", "ADMIN_TOKEN": token,
	}, logs))
	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
		if code := getBearer(t, admin+path, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without the token: %d, want 401", path, code)
		}
		if code := getBearer(t, admin+path, "wrong"); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d, want 401", path, code)
		}
		if code := getBearer(t, admin+path, token); code != http.StatusOK {
			t.Errorf("%s with the token: %d, want 200", path, code)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code := getBearer(t, admin+path, ""); code != http.StatusOK {
			t.Errorf("%s without the token: %d, want 200", path, code)
		}
	}
	if strings.Contains(logs.String(), metricsWarning) {
		t.Errorf("warned although ADMIN_TOKEN is set:\n%s", logs)
	}
}

// TestAdminMetricsBeyondLoopbackWarns: /metrics beyond loopback without ADMIN_TOKEN is
// served, with one warning at start naming ADMIN_TOKEN; on loopback there is none.
func TestAdminMetricsBeyondLoopbackWarns(t *testing.T) {
	logs := &apptest.LogBuffer{}
	admin := runAdminApp(t, newAdminApp(t, map[string]string{"ADMIN_ADDR": "0.0.0.0:0"}, logs))
	if code := getBearer(t, admin+"/metrics", ""); code != http.StatusOK {
		t.Errorf("/metrics: %d, want 200", code)
	}
	warned := 0
	for _, r := range logs.Records() {
		if msg, _ := r["msg"].(string); strings.Contains(msg, metricsWarning) && strings.Contains(msg, "ADMIN_TOKEN") && r["level"] == "WARN" {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("%d warnings about /metrics beyond loopback, want 1:\n%s", warned, logs)
	}

	quiet := &apptest.LogBuffer{}
	runAdminApp(t, newAdminApp(t, nil, quiet))
	if strings.Contains(quiet.String(), metricsWarning) {
		t.Errorf("warned for a loopback admin listener:\n%s", quiet)
	}
}

// TestAdminPprofBeyondLoopbackRefusedAtRun: an admin listener given to the App
// (WithAdminListener) on every interface with PPROF and no ADMIN_TOKEN: Run refuses to
// start, with an invalid-config error, and serves nothing.
func TestAdminPprofBeyondLoopbackRefusedAtRun(t *testing.T) {
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	a := newAdminApp(t, map[string]string{"PPROF": "1"}, io.Discard, app.WithAdminListener(ln))
	err = a.Run(context.Background())
	if !errors.Is(err, app.ErrInvalidConfig) || !strings.Contains(err.Error(), "ADMIN_TOKEN") {
		t.Fatalf("Run: %v; want an invalid-config error naming %s", err, "ADMIN_TOKEN")
	}
	if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
		c.Close()
		t.Errorf("the admin listener still accepts connections after the refusal")
	}
}
