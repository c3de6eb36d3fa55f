package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/internal/testenv"
)

const redisSecret = "r3dis-Secret-pw" // must never appear in an error or a log

// startRedis runs a redis-server of its own that requires redisSecret (TLS only with
// tlsFiles); see testenv.RedisServer.
func startRedis(t *testing.T, tlsFiles *testenv.TLSFiles) string {
	t.Helper()
	return testenv.RedisServer(t, redisSecret, tlsFiles)
}

func TestRedisURLConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"bad url", map[string]string{"REDIS_URL": "rediss://:" + redisSecret + "@host:notaport/x"}, []string{"REDIS_URL"}},
		{"bad scheme", map[string]string{"REDIS_URL": "http://:" + redisSecret + "@host:1"}, []string{"REDIS_URL"}},
		{"both", map[string]string{"REDIS_URL": "redis://:" + redisSecret + "@host:1", "REDIS_ADDR": "host:2"},
			[]string{"set only one of"}},
		{"ca without tls", map[string]string{"REDIS_URL": "redis://host:1", "REDIS_TLS_CA_FILE": "/ca.pem"},
			[]string{"REDIS_TLS_CA_FILE", "rediss://"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := app.MapEnv(tc.env)
			app.LoadConfig(env, "widget", ":8080")
			apptest.WantConfigError(t, env, tc.want...)
			if strings.Contains(env.Err().Error(), redisSecret) {
				t.Errorf("password in %v", env.Err())
			}
		})
	}
	env := app.MapEnv(map[string]string{"REDIS_URL": "redis://u:" + redisSecret + "@127.0.0.1:1/5"})
	cfg := app.LoadConfig(env, "widget", ":8080")
	if err := env.Err(); err != nil || cfg.RedisAddr != "" {
		t.Fatalf("valid REDIS_URL: %v, RedisAddr %q", err, cfg.RedisAddr)
	}
}

// TestRedisURL starts a redis-server that requires a password: a REDIS_URL with a wrong
// password fails New with a clear error naming neither password; the right one connects
// to the database the URL names, and locks work; rediss:// works against a TLS-only
// server with a CA generated for the test (REDIS_TLS_CA_FILE).
func TestRedisURL(t *testing.T) {
	ctx := context.Background()
	addr := startRedis(t, nil)
	f := testenv.TestTLS(t)
	tlsAddr := startRedis(t, &f)
	brokers := testenv.KafkaCluster(t).ListenAddrs()
	dsn := freshDSN(t)
	newApp := func(vars map[string]string) (*app.App, *apptest.LogBuffer, error) {
		vars["DATABASE_URL"], vars["KAFKA_BROKERS"] = dsn, strings.Join(brokers, ",")
		env := app.MapEnv(vars)
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
	for name, url := range map[string]string{
		"wrong password": "redis://:not-" + redisSecret + "@" + addr + "/0",
		"wrong user":     "redis://nobody:" + redisSecret + "@" + addr + "/0",
		"no password":    "redis://" + addr + "/0",
	} {
		_, logs, err := newApp(map[string]string{"REDIS_URL": url})
		if err == nil {
			t.Fatalf("%s: New accepted it", name)
		}
		msg := err.Error()
		if !strings.Contains(msg, "app: redis redis://"+addr+"/0") || !strings.Contains(msg, "REDIS_URL") {
			t.Errorf("%s: unclear error: %v", name, err)
		}
		if strings.Contains(msg+logs.String(), redisSecret) || strings.Contains(msg, "nobody") {
			t.Errorf("%s: credentials in error or logs: %v\n%s", name, err, logs)
		}
	}

	for name, vars := range map[string]map[string]string{
		"redis":  {"REDIS_URL": fmt.Sprintf("redis://default:%s@%s/3", redisSecret, addr)},
		"rediss": {"REDIS_URL": fmt.Sprintf("rediss://:%s@localhost:%s/4", redisSecret, strings.Split(tlsAddr, ":")[1]), "REDIS_TLS_CA_FILE": f.CAFile},
	} {
		a, logs, err := newApp(vars)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, logs)
		}
		db := a.Redis.Options().DB
		if err := a.Redis.Set(ctx, "probe", "1", time.Minute).Err(); err != nil {
			t.Fatalf("%s: set: %v", name, err)
		}
		l, err := a.Locker.Acquire(ctx, "w-1")
		if err != nil {
			t.Fatalf("%s: lock: %v", name, err)
		}
		_ = l.Release(ctx)
		// The key landed in the database the URL names.
		o, _ := redis.ParseURL(vars["REDIS_URL"])
		if o.TLSConfig != nil {
			o.TLSConfig.InsecureSkipVerify = true // this test's own server, checked above
		}
		o.DB = 0
		raw := redis.NewClient(o)
		if n, err := raw.Exists(ctx, "probe").Result(); err != nil || n != 0 {
			t.Errorf("%s: probe in db 0 (%d, %v), want only in db %d", name, n, err, db)
		}
		raw.Close()
		if strings.Contains(logs.String(), redisSecret) {
			t.Errorf("%s: password in the logs", name)
		}
	}
	// rediss:// without the CA: the server's certificate is refused.
	_, _, err := newApp(map[string]string{"REDIS_URL": fmt.Sprintf("rediss://:%s@localhost:%s/4", redisSecret, strings.Split(tlsAddr, ":")[1])})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("rediss without the CA: %v", err)
	}
}
