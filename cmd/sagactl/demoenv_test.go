package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWithDemoEnv: the demo's file fills in the addresses the environment leaves empty,
// and nothing else.
func TestWithDemoEnv(t *testing.T) {
	file := filepath.Join(t.TempDir(), "env")
	content := "# written by make demo\nORDER_URL=http://127.0.0.1:18080\nKAFKA_BROKERS=127.0.0.1:19092\n" +
		"ORDER_API_TOKEN=from-the-file\nnot a setting\n\nTRACKER_CONFIG=.demo/tracker.json\n"
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"KAFKA_BROKERS": "broker:9092"}
	getenv := withDemoEnv(func(k string) string { return env[k] }, file)
	for key, want := range map[string]string{
		"ORDER_URL":       "http://127.0.0.1:18080", // from the file
		"KAFKA_BROKERS":   "broker:9092",            // the environment wins
		"TRACKER_CONFIG":  ".demo/tracker.json",
		"ORDER_API_TOKEN": "", // not an address: never taken from the file
		"CONSOLE_ADDR":    "",
	} {
		if got := getenv(key); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}

	// Without the file (no demo running), getenv is the environment's.
	getenv = withDemoEnv(func(k string) string { return env[k] }, filepath.Join(t.TempDir(), "absent"))
	if got := getenv("ORDER_URL"); got != "" {
		t.Errorf("ORDER_URL without a demo = %q, want empty", got)
	}
}

// TestQueriesSayWhatToStart: a query of the tracker's index given no tracker names the
// commands that start one.
func TestQueriesSayWhatToStart(t *testing.T) {
	for _, args := range [][]string{{"flow"}, {"track", "stuck"}, {"track", "list"}} {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, stdio{out: &out, err: &errb, getenv: func(string) string { return "" }})
		errs := errb.String()
		if code != exitUsage || !strings.Contains(errs, "DEMO_KEEP=1 make demo") ||
			!strings.Contains(errs, "sagactl track -db URL -config deploy/tracker/order.json") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming what to start", args, code, errs, exitUsage)
		}
	}
}
