package apptest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
)

// Infra is what a service instance runs against: its Postgres database, a Redis lock
// namespace and a Kafka cluster. Instances started on one Infra share all three, as a
// restarted service does.
type Infra struct {
	DatabaseURL   string
	RedisAddr     string
	LockNamespace string
	Brokers       []string
}

// NewInfra returns a fresh database, Redis namespace and in-process kfake cluster (see
// internal/testenv), cleaned up when the test ends.
func NewInfra(t testing.TB) Infra {
	t.Helper()
	_, ns := testenv.Redis(t)
	return Infra{
		DatabaseURL: testenv.PostgresDSN(t), RedisAddr: testenv.RedisAddr(t), LockNamespace: ns,
		Brokers: testenv.KafkaCluster(t).ListenAddrs(),
	}
}

// NewDB returns a fresh database holding the library's tables and the script schema of
// service, migrated as the service does at start. The database is named service_t_,
// then (the end of) the test's name and a random suffix (as pg_stat_activity and psql show it while
// the test runs), and dropped when the test ends.
func NewDB(t testing.TB, service, schema string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool := testenv.PostgresNamed(t, service)
	if err := migrate.Up(ctx, pool); err != nil {
		t.Fatalf("apptest: migrate library: %v", err)
	}
	if err := app.MigrateSQL(ctx, pool, service, schema); err != nil {
		t.Fatalf("apptest: migrate %s: %v", service, err)
	}
	return pool
}

// Instance is a service started by StartApp.
type Instance struct {
	*Service
	*Kafka                // on the instance's cluster
	Pool    *pgxpool.Pool // on the instance's database
	BaseURL string        // of its HTTP server: http://host:port
}

// StartApp runs a service named name on in, waits until it is ready, and stops it when
// the test ends. run gets the app.Config that points at in (a free local HTTP port,
// 3 partitions per new topic, warn-level logs, a one-minute shutdown timeout) and the
// options that go with it (the port's listener, no signal handling, logs discarded,
// in's lock namespace); it may change or add to both, a later option winning, and
// hands them to the service's Run.
func StartApp(t testing.TB, in Infra, name string, run func(ctx context.Context, cfg app.Config, opts []app.Option) error) *Instance {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("apptest: listen: %v", err)
	}
	cfg := app.Config{
		Service: name, DatabaseURL: in.DatabaseURL, RedisAddr: in.RedisAddr, KafkaBrokers: in.Brokers,
		KafkaPartitions: 3, HTTPAddr: ln.Addr().String(), LogLevel: slog.LevelWarn,
		ShutdownTimeout: time.Minute,
	}
	opts := []app.Option{
		app.WithListener(ln), app.WithoutSignals(), app.WithLogOutput(io.Discard),
		app.WithLockOptions(lock.WithNamespace(in.LockNamespace)),
	}
	inst := &Instance{BaseURL: "http://" + ln.Addr().String()}
	inst.Service = Start(t, inst.BaseURL, func(ctx context.Context) error { return run(ctx, cfg, opts) })
	if inst.Pool, err = pgxpool.New(context.Background(), in.DatabaseURL); err != nil {
		t.Fatalf("apptest: connect to %s's database: %v", name, err)
	}
	t.Cleanup(inst.Pool.Close)
	inst.Kafka = NewKafka(t, in.Brokers)
	return inst
}

// Metrics returns the body of GET baseURL+"/metrics", failing t unless it answers 200.
func Metrics(t testing.TB, baseURL string) string {
	t.Helper()
	resp, err := http.Get(baseURL + "/metrics")
	if err != nil {
		t.Fatalf("apptest: metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("apptest: metrics: status %d, %v", resp.StatusCode, err)
	}
	return string(body)
}
