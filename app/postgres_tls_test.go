package app_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/internal/testenv/pgcluster"
)

// hbaTLSOnly lets clients in over TLS only (trust: the test is about the channel, and a
// password would only be sent through it).
const hbaTLSOnly = `local all all trust
hostssl all all 127.0.0.1/32 trust
hostssl all all ::1/128 trust
hostnossl all all 0.0.0.0/0 reject
hostnossl all all ::/0 reject
`

// TestPostgresTLS starts a Postgres cluster of its own (internal/testenv/pgcluster) that serves a
// certificate of a CA generated for the test and accepts TLS connections only, and runs
// New, whose pool takes DATABASE_URL as it is: sslmode=require and sslmode=verify-full
// (with sslrootcert the test CA) connect, and every session of the pool is encrypted
// (pg_stat_ssl); verify-full with another CA and sslmode=disable are refused with an
// error that says why.
func TestPostgresTLS(t *testing.T) {
	ctx := context.Background()
	f := testenv.TestTLS(t)
	other := testenv.TestTLS(t) // a CA that did not sign the server's certificate
	cert, err := os.ReadFile(f.ServerCertFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(f.ServerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Create(cctx, "choreo_tls_"+hex.EncodeToString(id[:]), pgcluster.WithTLS(cert, key),
		pgcluster.WithConfigFile("pg_hba.conf", []byte(hbaTLSOnly)), pgcluster.WithSetting("fsync", "off"))
	if err != nil {
		t.Fatalf("a Postgres cluster of the test's own (pg_createcluster, needs root or the postgres user): %v", err)
	}
	t.Cleanup(c.Drop)
	brokers := testenv.KafkaCluster(t).ListenAddrs()

	newApp := func(dsn string) (*app.App, *apptest.LogBuffer, error) {
		env := app.MapEnv(map[string]string{"DATABASE_URL": dsn, "REDIS_ADDR": "none",
			"KAFKA_BROKERS": strings.Join(brokers, ",")})
		cfg := app.LoadConfig(env, "widget", "127.0.0.1:0")
		if err := env.Err(); err != nil {
			t.Fatal(err)
		}
		logs := &apptest.LogBuffer{}
		a, err := app.New(ctx, cfg.Service, app.WithConfig(cfg), app.WithLogOutput(logs), app.WithoutSignals())
		if a != nil {
			t.Cleanup(func() { _ = a.Close() })
		}
		return a, logs, err
	}
	base := "postgres://postgres@" + c.Addr() + "/choreo_widget?sslmode="
	for _, mode := range []string{"require", "verify-full&sslrootcert=" + f.CAFile} {
		a, _, err := newApp(base + mode)
		if err != nil {
			t.Fatalf("sslmode=%s: New: %v", mode, err)
		}
		rows, err := a.Pool.Query(ctx, "SELECT s.ssl, s.version FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.datname = current_database()")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var ssl bool
			var version *string
			if err := rows.Scan(&ssl, &version); err != nil {
				t.Fatal(err)
			}
			if !ssl {
				t.Errorf("sslmode=%s: a session of the database is not encrypted", mode)
			}
			n++
		}
		if rows.Err() != nil || n == 0 {
			t.Fatalf("sslmode=%s: %d sessions, %v", mode, n, rows.Err())
		}
		_ = a.Close()
	}

	for name, tc := range map[string]struct{ mode, want string }{
		"wrong CA":  {"verify-full&sslrootcert=" + other.CAFile, "certificate signed by unknown authority"},
		"plaintext": {"disable", "no encryption"}, // pg_hba.conf: hostnossl ... reject
	} {
		_, _, err := newApp(base + tc.mode)
		if err == nil {
			t.Fatalf("%s: New connected", name)
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "choreo_widget") {
			t.Errorf("%s: unclear error (want %q and the database): %v", name, tc.want, err)
		}
		t.Logf("%s: %v", name, err)
	}
}
