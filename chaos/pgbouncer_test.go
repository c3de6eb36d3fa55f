package chaos

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/app"
)

// TestPgBouncerEnv: an instance behind the scenario's PgBouncer gets a pool URL on
// PgBouncer's address without named prepared statements and its relay's sessions direct,
// which the services' configuration accepts.
func TestPgBouncerEnv(t *testing.T) {
	const direct = "postgres://postgres@127.0.0.1:5432/chaos_x_payment?sslmode=disable"
	b := &pgBouncer{addr: "127.0.0.1:16432"}
	env, err := b.env(direct)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	pooled, err := pgx.ParseConfig(vars["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	if pooled.Host != "127.0.0.1" || pooled.Port != 16432 || pooled.Database != "chaos_x_payment" ||
		pooled.DefaultQueryExecMode != pgx.QueryExecModeCacheDescribe {
		t.Errorf("DATABASE_URL %s: want PgBouncer's address, the same database, cache_describe", vars["DATABASE_URL"])
	}
	if vars["DATABASE_SESSION_URL"] != direct {
		t.Errorf("DATABASE_SESSION_URL = %q, want the direct %q", vars["DATABASE_SESSION_URL"], direct)
	}
	e := app.MapEnv(vars)
	if app.LoadConfig(e, "payment", "127.0.0.1:0"); e.Err() != nil {
		t.Errorf("the services refuse the configuration: %v", e.Err())
	}
	delete(vars, "DATABASE_SESSION_URL")
	e = app.MapEnv(vars)
	if app.LoadConfig(e, "payment", "127.0.0.1:0"); e.Err() == nil {
		t.Error("a pooled DATABASE_URL without DATABASE_SESSION_URL is accepted")
	}
}
