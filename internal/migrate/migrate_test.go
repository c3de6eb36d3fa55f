package migrate

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/sqlname"
	"github.com/choreo-saga/choreo/internal/testenv"
)

func all() []Component {
	return []Component{
		Idempotency(sqlname.MustParse(defaultIdempotency)),
		Fences(),
		Outbox(sqlname.MustParse(defaultOutbox)),
		DeadLetters(sqlname.MustParse(defaultDeadLetters)),
	}
}

func versions(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	vs, err := Versions(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, v := range vs {
		if v.Version > m[v.Component] {
			m[v.Component] = v.Version
		}
		if v.AppliedAt.IsZero() {
			t.Errorf("%+v: no applied_at", v)
		}
	}
	return m
}

func tableExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestApplyRecordsVersions(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	if vs, err := Versions(ctx, pool); err != nil || len(vs) != 0 {
		t.Fatalf("Versions of an empty database = %v, %v", vs, err)
	}
	for range 2 { // the second call applies nothing
		if err := Apply(ctx, pool, all()...); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{
		"idempotency:public.choreo_idempotency":   2,
		"lock_fences:public.choreo_lock_fences":   1,
		"outbox:public.choreo_outbox":             1,
		"dead_letters:public.choreo_dead_letters": 2,
	}
	got := versions(t, pool)
	if len(got) != len(want) {
		t.Fatalf("versions = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("versions = %v, want %v", got, want)
		}
	}
	vs, _ := Versions(ctx, pool)
	if len(vs) != 6 {
		t.Errorf("%d version rows, want 6 (the second Apply recorded again?)", len(vs))
	}
	// Version 2 of the tables whose rows expire: autovacuum at 1% dead rows.
	for _, tbl := range []string{"choreo_idempotency", "choreo_dead_letters"} {
		var opts []string
		if err := pool.QueryRow(ctx, "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = $1::regclass", tbl).Scan(&opts); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(opts, "autovacuum_vacuum_scale_factor=0.01") {
			t.Errorf("%s reloptions = %v, want autovacuum_vacuum_scale_factor=0.01", tbl, opts)
		}
	}
	for _, tbl := range []string{"choreo_idempotency", "choreo_lock_fences", "choreo_outbox", "choreo_outbox_dead", "choreo_dead_letters"} {
		if !tableExists(t, pool, tbl) {
			t.Errorf("table %s missing", tbl)
		}
	}
}

// A database created by a release before versioning has the tables but no version rows:
// version 1 runs again (IF NOT EXISTS) and is recorded, and the rows are kept.
func TestApplyUpgradesUnversionedDatabase(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	c := Idempotency(sqlname.MustParse(defaultIdempotency))
	if _, err := pool.Exec(ctx, c.SQL()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO choreo_idempotency (scope, key, request_hash, expires_at) VALUES ('s', 'k', '\\x00', now())"); err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, pool, c); err != nil {
		t.Fatal(err)
	}
	if got := versions(t, pool); got["idempotency:public.choreo_idempotency"] != 2 {
		t.Fatalf("versions = %v", got)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM choreo_idempotency").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows = %d, %v; want the existing row kept", n, err)
	}
}

// A failing step rolls back the whole call: earlier steps and components, and the
// version rows.
func TestApplyRollsBackOnFailure(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	bad := Component{kind: "test", table: sqlname.MustParse("t"), steps: []string{
		"CREATE TABLE t (id int)",
		"ALTER TABLE t ADD COLUMN id int", // fails: the column exists
	}}
	err := Apply(ctx, pool, Fences(), bad)
	if err == nil || !strings.Contains(err.Error(), "test:public.t: version 2") {
		t.Fatalf("Apply = %v, want a version 2 error", err)
	}
	for _, tbl := range []string{"t", "choreo_lock_fences", VersionsTable} {
		if tableExists(t, pool, tbl) {
			t.Errorf("table %s survived the failed call", tbl)
		}
	}
}

// Instances starting together serialise on the lock: every step runs exactly once,
// although step 2 would fail (and step 3 count twice) if it ran twice.
func TestApplyConcurrentCallersSerialise(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	c := Component{kind: "test", table: sqlname.MustParse("runs"), steps: []string{
		"CREATE TABLE runs (n int)",
		"CREATE TABLE once (id int)",
		"INSERT INTO runs VALUES (1)",
	}}
	const callers = 8
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { errs[i] = Apply(ctx, pool, append(all(), c)...) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM runs").Scan(&n); err != nil || n != 1 {
		t.Fatalf("step 3 ran %d times (%v), want once", n, err)
	}
	if got := versions(t, pool); got["test:public.runs"] != 3 || len(got) != 5 {
		t.Fatalf("versions = %v", got)
	}
}

// A database a newer release migrated further is left alone (rolling deploys).
func TestApplyNewerDatabase(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	c := Fences()
	if err := Apply(ctx, pool, c); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+VersionsTable+" (component, version) VALUES ('lock_fences:public.choreo_lock_fences', 9)"); err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, pool, c); err != nil {
		t.Fatal(err)
	}
}

// Custom names are quoted, schema-qualified keys keep their schema, and an unqualified
// name resolves to the first schema of the search_path.
func TestApplyCustomNames(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA "Billing"; CREATE SCHEMA app`); err != nil {
		t.Fatal(err)
	}
	comps := []Component{
		Idempotency(sqlname.MustParse(`Billing.Idem "Keys"`)),
		Outbox(sqlname.MustParse("billing_out")),
		DeadLetters(sqlname.MustParse(`odd"name`)),
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET search_path TO app"); err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, conn.Conn(), comps...); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{`"Billing"."Idem ""Keys"""`, "app.billing_out", "app.billing_out_dead", `app."odd""name"`, "app." + VersionsTable} {
		if !tableExists(t, pool, tbl) {
			t.Errorf("table %s missing", tbl)
		}
	}
	vs, err := Versions(ctx, conn.Conn())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, v := range vs {
		keys = append(keys, v.Component)
	}
	if got, want := strings.Join(keys, "|"), `dead_letters:app.odd"name|dead_letters:app.odd"name|idempotency:Billing.Idem "Keys"|idempotency:Billing.Idem "Keys"|outbox:app.billing_out`; got != want {
		t.Errorf("components = %s, want %s", got, want)
	}
	if _, err := conn.Exec(ctx, "RESET search_path"); err != nil {
		t.Fatal(err)
	}
}

func TestComponentSQL(t *testing.T) {
	s := Outbox(sqlname.MustParse("billing.out")).SQL()
	for _, want := range []string{"-- choreo migration: outbox version 1\n", `"billing"."out" (`, `"billing"."out_dead" (`} {
		if !strings.Contains(s, want) {
			t.Errorf("SQL lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "choreo_outbox") || strings.Contains(s, "advisory") {
		t.Errorf("SQL:\n%s", s)
	}
}
