package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/internal/testenv"
)

func runMigrate(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"migrate"}, args...),
		stdio{out: &out, err: &errb, getenv: func(k string) string { return env[k] }})
	return code, out.String(), errb.String()
}

func TestMigrate(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	for range 2 { // the second run applies nothing and reports the same versions
		code, out, errs := runMigrate(t, nil, "-database-url", dsn, "-json", "-outbox-table", "events_out")
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var got struct {
			Versions []struct {
				Component string `json:"component"`
				Version   int    `json:"version"`
				AppliedAt string `json:"applied_at"`
			} `json:"versions"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		var comps []string
		for _, v := range got.Versions {
			if v.AppliedAt == "" {
				t.Errorf("%+v", v)
			}
			comps = append(comps, fmt.Sprintf("%s@%d", v.Component, v.Version))
		}
		want := "dead_letters:public.choreo_dead_letters@1 dead_letters:public.choreo_dead_letters@2 idempotency:public.choreo_idempotency@1 idempotency:public.choreo_idempotency@2 lock_fences:public.choreo_lock_fences@1 outbox:public.events_out@1"
		if strings.Join(comps, " ") != want {
			t.Fatalf("components %v, want %s", comps, want)
		}
	}
	// Table output, with the URL from the environment.
	code, out, errs := runMigrate(t, map[string]string{"DATABASE_URL": dsn})
	if code != exitOK || !strings.Contains(out, "COMPONENT") || !strings.Contains(out, "idempotency:public.choreo_idempotency  ") {
		t.Fatalf("exit %d:\n%s%s", code, out, errs)
	}
}

func TestMigrateSQL(t *testing.T) {
	code, out, errs := runMigrate(t, nil, "-sql", "-idempotency-table", "billing.idem")
	if code != exitOK || !strings.Contains(out, `CREATE TABLE IF NOT EXISTS "billing"."idem"`) ||
		!strings.Contains(out, "-- choreo migration: outbox version 1") {
		t.Fatalf("exit %d:\n%s%s", code, out, errs)
	}
}

func TestMigrateErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, exitUsage, "needs -database-url"},
		{[]string{"-database-url", "postgres://u:secret@127.0.0.1:5432/x", "-outbox-table", "Bad"}, exitUsage, "invalid configuration: table name"},
		{[]string{"-database-url", "::not a url secret"}, exitUsage, "not a Postgres connection string"},
		{[]string{"-database-url", "postgres://u:secret@127.0.0.1:1/x?connect_timeout=2"}, exitUnreachable, "postgres"},
		{[]string{"extra"}, exitUsage, "no arguments"},
	} {
		code, _, errs := runMigrate(t, nil, tt.args...)
		if code != tt.code || !strings.Contains(errs, tt.msg) || strings.Contains(errs, "secret") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", tt.args, code, errs, tt.code, tt.msg)
		}
	}
}
