package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
)

// freshDSN returns a DSN naming a database that does not exist yet on the test server,
// and drops it when the test ends.
func freshDSN(t *testing.T) string {
	t.Helper()
	base := testenv.PostgresDSN(t) // proves the server is there
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.Name(t, "choreo_app")
	u.Path = "/" + name
	t.Cleanup(func() {
		admin := *u
		admin.Path = "/postgres"
		conn, err := pgx.Connect(context.Background(), admin.String())
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	return u.String()
}

func TestEnsureDatabase(t *testing.T) {
	ctx := context.Background()
	dsn := freshDSN(t)
	if _, err := pgx.Connect(ctx, dsn); err == nil {
		t.Fatal("database exists before EnsureDatabase")
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = app.EnsureDatabase(ctx, dsn) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent EnsureDatabase: %v", err)
		}
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("database not created: %v", err)
	}
	conn.Close(ctx)
	if err := app.EnsureDatabase(ctx, dsn); err != nil {
		t.Fatalf("second call: %v", err)
	}
	// DATABASE_URL may carry pgxpool's settings; the server must not see them.
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	if err := app.EnsureDatabase(ctx, dsn+sep+"pool_max_conns=3&pool_min_conns=1"); err != nil {
		t.Fatalf("dsn with pool settings: %v", err)
	}

	if err := app.EnsureDatabase(ctx, "postgres://127.0.0.1:5432/"); !errors.Is(err, app.ErrInvalidConfig) {
		t.Errorf("dsn without database: %v", err)
	}
	err = app.EnsureDatabase(ctx, "postgres://user:s3cret@127.0.0.1:1/db?connect_timeout=2")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("unreachable server: err = %v (must fail without the password)", err)
	}
}

func TestMigrations(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	const script = `CREATE TABLE IF NOT EXISTS widgets (id int PRIMARY KEY);
		CREATE INDEX IF NOT EXISTS widgets_id ON widgets (id);`
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			if i%2 == 0 {
				errs[i] = migrate.Up(ctx, pool)
			} else {
				errs[i] = app.MigrateSQL(ctx, pool, "widgets", script)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"choreo_idempotency", "choreo_lock_fences", "choreo_outbox", "choreo_outbox_dead", consumer.DefaultDeadLetterTable, "widgets"} {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil || !ok {
			t.Errorf("table %s missing (%v)", table, err)
		}
	}
	if err := app.MigrateSQL(ctx, pool, "bad", "CREATE TABLE nope ("); err == nil || !strings.Contains(err.Error(), "app: migrate bad") {
		t.Errorf("bad script: %v", err)
	}
}

// EnsureTopics creates the missing topics, leaves existing ones alone, and returns once the
// topics are in every broker's metadata: a new client asking right away finds them all.
func TestEnsureTopics(t *testing.T) {
	ctx := context.Background()
	brokers := testenv.Kafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	existing := testenv.Topic(t, brokers, 1)
	// Another client, connected before the topics exist, asks as soon as EnsureTopics returns
	// (a broker's metadata may lag its CreateTopics answer by some milliseconds, so five
	// rounds of new topics, each ensured twice).
	other, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		fresh := strings.ReplaceAll(testenv.Name(t, "a"), "_", "-")
		topics := []string{fresh, existing, fresh + ".dlq", existing + ".dlq"}
		for range 2 {
			if err := app.EnsureTopics(ctx, cl, 3, topics...); err != nil {
				t.Fatal(err)
			}
			details, err := kadm.NewClient(other).ListTopics(ctx, topics...)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int{fresh: 3, fresh + ".dlq": 3, existing: 1, existing + ".dlq": 3}
			for name, n := range want {
				if got := len(details[name].Partitions); got != n || details[name].Err != nil {
					t.Errorf("round %d: %s has %d partitions (%v), want %d", round, name, got, details[name].Err, n)
				}
			}
		}
	}
	if err := app.EnsureTopics(ctx, cl, 0, "x"); !errors.Is(err, app.ErrInvalidConfig) {
		t.Errorf("0 partitions: %v", err)
	}
}

// testApp builds an App on fresh Postgres, Redis and kfake.
type testApp struct {
	*app.App
	brokers []string
	base    string
	logs    *apptest.LogBuffer
	rdb     *redis.Client // the test's Redis, with the locker's keys under lockNS
	lockNS  string
}

func newTestApp(t *testing.T, opts ...app.Option) *testApp {
	t.Helper()
	return newTestAppSignals(t, append([]app.Option{app.WithoutSignals()}, opts...)...)
}

// newTestAppSignals is newTestApp with Run listening for SIGINT and SIGTERM.
func newTestAppSignals(t *testing.T, opts ...app.Option) *testApp {
	t.Helper()
	rdb, ns := testenv.Redis(t)
	brokers := testenv.KafkaCluster(t).ListenAddrs()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env := app.MapEnv(map[string]string{
		"DATABASE_URL": freshDSN(t), "REDIS_ADDR": testenv.RedisAddr(t),
		"KAFKA_BROKERS": strings.Join(brokers, ","), "KAFKA_PARTITIONS": "2", "LOG_LEVEL": "debug",
	})
	cfg := app.LoadConfig(env, "widget", ln.Addr().String())
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	logs := &apptest.LogBuffer{}
	a, err := app.New(context.Background(), cfg.Service, append([]app.Option{app.WithConfig(cfg),
		app.WithListener(ln), app.WithLogOutput(logs),
		app.WithLockOptions(lock.WithNamespace(ns)), app.WithEntityAttribute("widget.id"),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &testApp{App: a, brokers: brokers, base: "http://" + ln.Addr().String(), logs: logs, rdb: rdb, lockNS: ns}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAppLifecycle runs a small service on the App: an HTTP route, a consumer that
// answers ping with pong through the outbox, and a background function that enqueues
// one last event when it is stopped. The ordered shutdown must still publish that event
// (background functions stop before the relay) and Run must return nil.
func TestAppLifecycle(t *testing.T) {
	ctx := context.Background()
	a := newTestApp(t)
	if err := a.EnsureTopics(ctx, "widgets.in", "widgets.out"); err != nil {
		t.Fatal(err)
	}
	if err := app.MigrateSQL(ctx, a.Pool, "widget", `CREATE TABLE IF NOT EXISTS widgets (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	a.HandleHTTPFunc("GET /widgets/{id}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "widget "+r.PathValue("id"))
	})
	router := consumer.NewRouter().
		Handle("widget.ping", func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			if _, err := tx.Exec(ctx, `INSERT INTO widgets (id) VALUES ($1)`, ev.Subject); err != nil {
				return err
			}
			out, err := event.New("widget", "widget.pong", ev.Subject, map[string]string{"id": ev.Subject})
			if err != nil {
				return err
			}
			return a.Outbox.Enqueue(ctx, tx, "widgets.out", out.CausedBy(ev))
		}).
		Ignore("widget.noise")
	if err := a.Consume(app.ConsumerSpec{Group: "widget", Topics: []string{"widgets.in"}, Router: router}); err != nil {
		t.Fatal(err)
	}
	a.Go("farewell", func(ctx context.Context) error {
		<-ctx.Done()
		ev, err := event.New("widget", "widget.farewell", "w-last", map[string]string{})
		if err != nil {
			return err
		}
		return a.Outbox.InTx(context.WithoutCancel(ctx), a.Pool, func(ctx context.Context, tx pgx.Tx) error {
			return a.Outbox.Enqueue(ctx, tx, "widgets.out", ev)
		})
	})

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	<-a.Ready()
	apptest.WaitReady(t, a.base)

	code, body := get(t, a.base+"/readyz")
	var ready struct {
		Status string
		Checks map[string]string
	}
	if err := json.Unmarshal([]byte(body), &ready); err != nil || code != 200 || ready.Status != "ok" ||
		ready.Checks["postgres"] != "ok" || ready.Checks["redis"] != "ok" || ready.Checks["kafka"] != "ok" {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	if code, body := get(t, a.base+"/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	if code, body := get(t, a.base+"/widgets/w-9"); code != 200 || body != "widget w-9" {
		t.Fatalf("route = %d %s", code, body)
	}

	k := apptest.NewKafka(t, a.brokers)
	ping := func(id string) event.Event {
		ev, err := event.New("test", "widget.ping", id, map[string]string{"id": id})
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	noise, _ := event.New("test", "widget.noise", "w-1", map[string]string{})
	k.ProduceTwice("widgets.in", ping("w-1"), ping("w-2"), noise)
	k.WaitSettled(a.Pool, "", map[string][]string{"widget": {"widgets.in"}})
	if got := k.Events("widgets.out"); len(got) != 2 || len(got["w-1"]) != 1 || len(got["w-2"]) != 1 {
		t.Fatalf("published %v", got)
	}
	// The consumer joined with dynamic membership (the default: no instance id), and
	// /readyz reports its assignment check.
	described, err := kadm.NewClient(a.Kafka).DescribeGroups(ctx, "widget")
	if err != nil {
		t.Fatal(err)
	}
	if ms := described["widget"].Members; len(ms) != 1 || ms[0].InstanceID != nil || a.Config.KafkaInstanceID != "" {
		t.Errorf("group members %+v (config %q), want one dynamic member", ms, a.Config.KafkaInstanceID)
	}
	if code, body := get(t, a.base+"/readyz"); code != 200 || !strings.Contains(body, `"consumer widget partitions":"ok"`) {
		t.Errorf("/readyz = %d %s", code, body)
	}

	code, metrics := get(t, a.base+"/metrics")
	for _, m := range []string{"choreo_consumer_outcomes", "choreo_outbox_published", "http_server", "go_goroutines", "choreo_db_pool_idle_closed"} {
		if code != 200 || !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}

	pool := a.Pool // closed by Run's shutdown; keep the DSN to look afterwards
	dsn := pool.Config().ConnString()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if got := k.Events("widgets.out")["w-last"]; len(got) != 1 || got[0].Type != "widget.farewell" {
		t.Fatalf("event enqueued during shutdown was not published before the relay stopped: %v", got)
	}
	// No lease outlives the service (Lock releases in the background; Run waits for them).
	var held []string
	for _, key := range a.rdb.Keys(ctx, a.lockNS+"*").Val() {
		if !strings.HasSuffix(key, ":fence") {
			held = append(held, key)
		}
	}
	if len(held) != 0 {
		t.Errorf("locks still held after Run returned: %v", held)
	}
	if fences := a.rdb.Keys(ctx, a.lockNS+"*:fence").Val(); len(fences) == 0 {
		t.Error("no fencing counters in Redis: the consumer took no leases, so the check above proves nothing")
	}
	after, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	var rows int
	if err := after.QueryRow(ctx, `SELECT count(*) FROM choreo_outbox`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("outbox after shutdown: %d rows (%v)", rows, err)
	}

	logs := a.logs.String()
	// No exporter in the test's environment: the start line says spans carry ids only.
	if !strings.Contains(logs, `"traces_exporter":"none","spans_recorded":false`) {
		t.Errorf("start line does not report the unrecorded traces:\n%s", logs)
	}
	order := []string{`"step":"http"`, `"step":"consumers"`, `"step":"relay"`, `"step":"close"`}
	last := -1
	for _, s := range order {
		i := strings.Index(logs, s)
		if i < last {
			t.Fatalf("shutdown steps out of order (%s):\n%s", s, logs)
		}
		last = i
	}
	if !strings.Contains(logs, `"service":"widget"`) || !strings.Contains(logs, `"trace_id"`) {
		t.Errorf("logs lack service or trace ids:\n%s", logs)
	}
	if err := a.Run(ctx); !errors.Is(err, app.ErrRunning) {
		t.Errorf("second Run = %v", err)
	}
}

// SIGTERM starts the same graceful shutdown as a cancelled context.
func TestSIGTERM(t *testing.T) {
	a := newTestAppSignals(t)
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	<-a.Ready()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if logs := a.logs.String(); !strings.Contains(logs, "terminated signal received") {
		t.Errorf("shutdown cause not logged:\n%s", logs)
	}
	if !strings.Contains(a.logs.String(), `"step":"close"`) {
		t.Errorf("shutdown did not complete:\n%s", a.logs.String())
	}
}

func TestReadyzReportsFailingChecks(t *testing.T) {
	a := newTestApp(t)
	a.AddCheck("gateway", func(ctx context.Context) error { return errors.New("gateway down") })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	<-a.Ready()
	code, body := get(t, a.base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "gateway down") || !strings.Contains(body, `"postgres":"ok"`) {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestComponentFailureStopsTheService(t *testing.T) {
	a := newTestApp(t)
	boom := errors.New("boom")
	a.Go("exploder", func(ctx context.Context) error { return boom })
	err := a.Run(context.Background())
	if !errors.Is(err, app.ErrComponent) || !errors.Is(err, boom) || !strings.Contains(err.Error(), "exploder") {
		t.Fatalf("Run = %v", err)
	}
	if err := a.Pool.Ping(context.Background()); err == nil {
		t.Error("pool still open after Run returned")
	}
}

func TestNewFailsCleanly(t *testing.T) {
	env := app.MapEnv(map[string]string{
		"DATABASE_URL": freshDSN(t), "REDIS_ADDR": "127.0.0.1:1",
		"KAFKA_BROKERS": strings.Join(testenv.KafkaCluster(t).ListenAddrs(), ","),
	})
	cfg := app.LoadConfig(env, "widget", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := app.New(ctx, cfg.Service, app.WithConfig(cfg), app.WithLogOutput(io.Discard))
	if err == nil || !strings.Contains(err.Error(), "app: redis 127.0.0.1:1") {
		t.Fatalf("New = %v", err)
	}
	if _, err := app.New(ctx, "x", app.WithConfig(app.Config{Service: "x"})); !errors.Is(err, app.ErrInvalidConfig) {
		t.Fatalf("invalid config: %v", err)
	}
}

// REDIS_ADDR=none runs without Redis: no locker, no redis readiness check, and
// consumers still work (the Postgres transaction alone guards them).
func TestWithoutRedis(t *testing.T) {
	brokers := testenv.KafkaCluster(t).ListenAddrs()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env := app.MapEnv(map[string]string{
		"DATABASE_URL": freshDSN(t), "REDIS_ADDR": "none", "KAFKA_BROKERS": strings.Join(brokers, ","),
	})
	cfg := app.LoadConfig(env, "widget", ln.Addr().String())
	a, err := app.New(context.Background(), cfg.Service, app.WithConfig(cfg), app.WithListener(ln), app.WithoutSignals(), app.WithLogOutput(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	if a.Redis != nil || a.Locker != nil {
		t.Fatal("Redis or Locker set without REDIS_ADDR")
	}
	if err := a.EnsureTopics(context.Background(), "w.in"); err != nil {
		t.Fatal(err)
	}
	h := func(ctx context.Context, tx pgx.Tx, ev event.Event) error { return nil }
	if err := a.Consume(app.ConsumerSpec{Group: "w", Topics: []string{"w.in"}, Handler: h}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	<-a.Ready()
	base := "http://" + a.Addr()
	apptest.WaitReady(t, base)
	if _, body := get(t, base+"/readyz"); strings.Contains(body, "redis") {
		t.Errorf("/readyz checks redis: %s", body)
	}
	k := apptest.NewKafka(t, brokers)
	ev, _ := event.New("test", "w.thing", "w-1", map[string]string{})
	k.ProduceTwice("w.in", ev)
	k.WaitSettled(a.Pool, "", map[string][]string{"w": {"w.in"}})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// New reads the environment itself and reports every problem of it at once; a
// component that fails on its own stops Run with its error.
func TestNewFromEnv(t *testing.T) {
	ctx := context.Background()
	_, err := app.New(ctx, "widget", app.WithEnv(app.MapEnv(map[string]string{
		"KAFKA_PARTITIONS": "zero", "SHUTDOWN_TIMEOUT": "-1s", "REDIS_ADDR": "redis",
	})), app.WithSchema("widget", " "))
	for _, want := range []string{"KAFKA_PARTITIONS", "SHUTDOWN_TIMEOUT", "REDIS_ADDR", `WithSchema("widget")`} {
		if !errors.Is(err, app.ErrInvalidConfig) || !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("New = %v; want ErrInvalidConfig naming %s", err, want)
		}
	}

	ns := func(t *testing.T) string { _, ns := testenv.Redis(t); return ns }(t)
	env := app.MapEnv(map[string]string{
		"DATABASE_URL": freshDSN(t), "REDIS_ADDR": testenv.RedisAddr(t), "HTTP_ADDR": "127.0.0.1:0",
		"ADMIN_ADDR": "none", "KAFKA_BROKERS": strings.Join(testenv.KafkaCluster(t).ListenAddrs(), ","),
	})
	a, err := app.New(ctx, "widget", app.WithEnv(env), app.WithoutSignals(), app.WithLogOutput(io.Discard),
		app.WithLockOptions(lock.WithNamespace(ns)), app.WithSchema("widget", `CREATE TABLE IF NOT EXISTS widgets (id text PRIMARY KEY)`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Pool.Exec(ctx, `INSERT INTO widgets VALUES ('w-1')`); err != nil {
		t.Fatalf("the schema of WithSchema is not there after New: %v", err)
	}
	boom := errors.New("boom")
	a.Go("exploder", func(context.Context) error { return boom })
	if err := a.Run(ctx); !errors.Is(err, boom) || !errors.Is(err, app.ErrComponent) {
		t.Fatalf("Run = %v, want the component's error", err)
	}
}

// A consumer whose handler's table is missing (SQLSTATE 42P01, a bad deploy) is in an
// outage: /readyz reports it under "consumer <group>" without naming hosts, the event is
// not dead-lettered, and once the table exists the event is handled and /readyz is ok.
func TestReadyzReportsConsumerOutage(t *testing.T) {
	ctx := context.Background()
	a := newTestApp(t)
	if err := a.EnsureTopics(ctx, "widgets.in"); err != nil {
		t.Fatal(err)
	}
	h := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO late_widgets (id) VALUES ($1)`, ev.Subject)
		return err
	}
	if err := a.Consume(app.ConsumerSpec{Group: "widget", Topics: []string{"widgets.in"}, Handler: h,
		Options: []consumer.Option{consumer.WithOutageBackoff(10*time.Millisecond, 100*time.Millisecond)}}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	<-a.Ready()
	apptest.WaitReady(t, a.base)

	k := apptest.NewKafka(t, a.brokers)
	ev, _ := event.New("test", "widget.ping", "w-1", map[string]string{})
	k.ProduceTwice("widgets.in", ev)
	var body string
	deadline := time.Now().Add(time.Minute)
	for {
		var code int
		code, body = get(t, a.base+"/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "consumer: outage") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never reported the outage: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var ready struct{ Checks map[string]string }
	if err := json.Unmarshal([]byte(body), &ready); err != nil {
		t.Fatal(err)
	}
	msg := ready.Checks["consumer widget"]
	if !strings.Contains(msg, "widgets.in/") || ready.Checks["postgres"] != "ok" {
		t.Errorf("/readyz: %s", body)
	}
	for _, secret := range []string{"127.0.0.1", "user=", "password"} {
		if strings.Contains(body, secret) {
			t.Errorf("/readyz names %q: %s", secret, body)
		}
	}
	if _, err := a.Pool.Exec(ctx, `CREATE TABLE late_widgets (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	k.WaitSettled(a.Pool, "", map[string][]string{"widget": {"widgets.in"}})
	apptest.WaitReady(t, a.base)
	var n int
	if err := a.Pool.QueryRow(ctx, `SELECT count(*) FROM late_widgets`).Scan(&n); err != nil || n != 1 {
		t.Errorf("late_widgets holds %d rows (%v), want 1", n, err)
	}
	if dl := k.ReadAll("widgets.in.dlq"); len(dl) != 0 {
		t.Errorf("%d records dead-lettered, want 0", len(dl))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Config.ShutdownTimeout reaches the consumers: a handler that does not return on its own
// has its context cancelled during Run's shutdown (after half of the timeout), so Run
// never returns while it is still running.
func TestShutdownTimeoutReachesConsumers(t *testing.T) {
	brokers := testenv.KafkaCluster(t).ListenAddrs()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env := app.MapEnv(map[string]string{
		"DATABASE_URL": freshDSN(t), "REDIS_ADDR": "none", "KAFKA_BROKERS": strings.Join(brokers, ","),
		"SHUTDOWN_TIMEOUT": "2s",
	})
	cfg := app.LoadConfig(env, "widget", ln.Addr().String())
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	a, err := app.New(context.Background(), cfg.Service, app.WithConfig(cfg), app.WithListener(ln), app.WithoutSignals(), app.WithLogOutput(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.EnsureTopics(context.Background(), "slow.in"); err != nil {
		t.Fatal(err)
	}
	started, cancelled := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		once.Do(func() { close(started) })
		<-ctx.Done() // never finishes on its own
		select {
		case <-cancelled:
		default:
			close(cancelled)
		}
		return ctx.Err()
	}
	if err := a.Consume(app.ConsumerSpec{Group: "slow", Topics: []string{"slow.in"}, Handler: h}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	<-a.Ready()
	ev, _ := event.New("test", "slow.thing", "s-1", map[string]string{})
	apptest.NewKafka(t, brokers).ProduceTwice("slow.in", ev)
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the handler never ran")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Run did not return")
	}
	select {
	case <-cancelled:
	default:
		t.Fatal("Run returned while the handler was still running: the consumer did not get Config.ShutdownTimeout")
	}
}

// TestWarmPool: with DATABASE_MIN_CONNS the pool's connections are open when New
// returns, on the server as in the pool, no more than asked for, and a negative value is
// a config error.
func TestWarmPool(t *testing.T) {
	a, logs, err := newPoolApp(t, freshDSN(t), "12", "4")
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Pool.Stat().TotalConns(); got < 4 {
		t.Errorf("pool holds %d connections after New, want at least 4", got)
	}
	var backends int
	err = a.Pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'").Scan(&backends)
	if err != nil {
		t.Fatal(err)
	}
	if backends < 4 {
		t.Errorf("%d backends on the server, want at least 4", backends)
	}
	if backends > 4 {
		t.Errorf("%d connections to the database after the warm-up, want the 4 of DATABASE_MIN_CONNS (no more)", backends)
	}
	if !strings.Contains(logs.String(), "postgres pool warmed") {
		t.Errorf("no warm-up log line:\n%s", logs.String())
	}

	bad := app.MapEnv(map[string]string{"DATABASE_MIN_CONNS": "-1"})
	app.LoadConfig(bad, "widget", ":0")
	if err := bad.Err(); err == nil || !strings.Contains(err.Error(), "DATABASE_MIN_CONNS") {
		t.Errorf("negative %s: err = %v", "DATABASE_MIN_CONNS", err)
	}
}

// TestWarmConnsCloseWhenIdle: DATABASE_MIN_CONNS's connections warm the pool at start but
// are not kept: once idle past the pool's idle time they close like any other, so an idle
// instance holds none of them. Here pgxpool's own health check closes them, with its idle
// time and period shortened through the URL or WithPoolConfig (either hands the closing to
// it; the App's own closer runs only in Run).
func TestWarmConnsCloseWhenIdle(t *testing.T) {
	short := func(c *pgxpool.Config) {
		c.MaxConnIdleTime, c.HealthCheckPeriod = 200*time.Millisecond, 100*time.Millisecond
	}
	for _, tc := range []struct {
		name  string
		query string
		opts  []app.Option
	}{
		{"url", "pool_max_conn_idle_time=200ms&pool_health_check_period=100ms", nil},
		{"WithPoolConfig", "", []app.Option{app.WithPoolConfig(short)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := freshDSN(t)
			if tc.query != "" {
				sep := "?"
				if strings.Contains(dsn, "?") {
					sep = "&"
				}
				dsn += sep + tc.query
			}
			a, _, err := newPoolApp(t, dsn, "12", "4", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			// (TestWarmPool checks that they are open when New returns.)
			testenv.Eventually(t, time.Minute, "the warm-up's connections to close once idle", func() bool {
				return a.Pool.Stat().TotalConns() == 0
			})
		})
	}
}

// TestWarmPoolShort: a warm-up the server cuts short (here a role's connection limit) is
// a Warn, not a failed start.
func TestWarmPoolShort(t *testing.T) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testenv.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	role := testenv.Name(t, "choreo_warm")
	if _, err := admin.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN CONNECTION LIMIT 2"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the database's own cleanup (cleanups run last-in first-out)
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Error(err)
		}
	})
	dsn := freshDSN(t)
	if err := app.EnsureDatabase(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{strings.TrimPrefix(u.Path, "/")}.Sanitize()+
		" OWNER TO "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)

	_, logs, err := newPoolApp(t, u.String(), "6", "5")
	if err != nil {
		t.Fatalf("New with a warm-up the server cut short: %v", err)
	}
	if !strings.Contains(logs.String(), "postgres pool warm-up incomplete") {
		t.Errorf("no Warn for the short warm-up:\n%s", logs.String())
	}
}

// newPoolApp builds an App without Redis on dsn with the given DATABASE_MAX_CONNS and
// DATABASE_MIN_CONNS, closed when the test ends, and returns its log.
func newPoolApp(t *testing.T, dsn, maxConns, minConns string, opts ...app.Option) (*app.App, *apptest.LogBuffer, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env := app.MapEnv(map[string]string{
		"DATABASE_URL": dsn, "REDIS_ADDR": "none", "KAFKA_BROKERS": strings.Join(testenv.KafkaCluster(t).ListenAddrs(), ","),
		"DATABASE_MAX_CONNS": maxConns, "DATABASE_MIN_CONNS": minConns,
	})
	cfg := app.LoadConfig(env, "widget", ln.Addr().String())
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	logs := &apptest.LogBuffer{}
	a, err := app.New(context.Background(), cfg.Service, append([]app.Option{app.WithConfig(cfg), app.WithListener(ln), app.WithoutSignals(), app.WithLogOutput(logs)}, opts...)...)
	if err != nil {
		return nil, logs, err
	}
	t.Cleanup(func() { a.Close() })
	return a, logs, nil
}
