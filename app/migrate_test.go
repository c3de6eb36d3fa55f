package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
)

// The App migrates and sweeps the idempotency store it was given, not the default table,
// and migrates the outbox it was given.
func TestCustomIdempotencyStoreMigratedAndSwept(t *testing.T) {
	ctx := context.Background()
	store, err := idempotency.NewStore(idempotency.WithTable("x"))
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(outbox.WithTable("x_out"))
	if err != nil {
		t.Fatal(err)
	}
	a := newTestApp(t, app.WithIdempotencyStore(store), app.WithOutbox(ob))
	exists := func(table string) bool {
		var ok bool
		if err := a.Pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !exists("x") || exists(idempotency.DefaultTable) {
		t.Fatalf("table x exists: %v, default table exists: %v; want only x", exists("x"), exists(idempotency.DefaultTable))
	}
	if !exists("x_out") || !exists("x_out_dead") || exists(outbox.DefaultTable) {
		t.Fatalf("tables x_out: %v, x_out_dead: %v, %s: %v; want only the custom outbox's",
			exists("x_out"), exists("x_out_dead"), outbox.DefaultTable, exists(outbox.DefaultTable))
	}
	vs, err := migrate.Versions(ctx, a.Pool)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range vs {
		found = found || v.Component == "idempotency:public.x"
	}
	if !found {
		t.Fatalf("no recorded version for x: %+v", vs)
	}
	if _, err := a.Pool.Exec(ctx, `INSERT INTO x (scope, key, request_hash, expires_at)
		VALUES ('s', 'expired', '\x00', now() - interval '1 hour'), ('s', 'live', '\x00', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// The sweeper sweeps once at start.
	var keys []string
	for deadline := time.Now().Add(20 * time.Second); ; {
		rows, err := a.Pool.Query(ctx, "SELECT key FROM x ORDER BY key")
		if err != nil {
			t.Fatal(err)
		}
		keys = keys[:0]
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(keys) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("expired row not swept from x: %v", keys)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if keys[0] != "live" {
		t.Fatalf("rows left in x: %v, want [live]", keys)
	}
}
