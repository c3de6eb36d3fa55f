package app

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEnvGetters(t *testing.T) {
	env := MapEnv(map[string]string{
		"S": " hello ", "BLANK": "   ", "I": "42", "I64": "-7", "F": "0.25", "B": "yes", "D": "1m30s",
		"L": "a, b,,c ", "LV": "warn", "EMPTYLIST": " , ",
	})
	if got := env.String("S", "x"); got != "hello" {
		t.Errorf("String = %q", got)
	}
	if got := env.String("BLANK", "def"); got != "def" {
		t.Errorf("blank String = %q, want the default", got)
	}
	if got := env.String("MISSING", "def"); got != "def" {
		t.Errorf("missing String = %q", got)
	}
	if got := env.Int("I", 0); got != 42 {
		t.Errorf("Int = %d", got)
	}
	if got := env.Int64("I64", 0); got != -7 {
		t.Errorf("Int64 = %d", got)
	}
	if got := env.Float64("F", 0); got != 0.25 {
		t.Errorf("Float64 = %v", got)
	}
	if got := env.Bool("B", false); !got {
		t.Errorf("Bool = %v", got)
	}
	if got := env.Duration("D", 0); got != 90*time.Second {
		t.Errorf("Duration = %v", got)
	}
	if got := env.List("L", nil); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("List = %q", got)
	}
	if got := env.List("EMPTYLIST", []string{"d"}); !slices.Equal(got, []string{"d"}) {
		t.Errorf("empty List = %q", got)
	}
	if got := env.Level("LV", slog.LevelInfo); got != slog.LevelWarn {
		t.Errorf("Level = %v", got)
	}
	if err := env.Err(); err != nil {
		t.Fatalf("Err = %v", err)
	}
}

func TestEnvCollectsEveryProblem(t *testing.T) {
	env := MapEnv(map[string]string{
		"I": "4x", "F": "NaN", "B": "perhaps", "D": "-1s", "D2": "soon", "LV": "loud",
		"DATABASE_URL": "postgres://u:hunter2@h/db?bad=%zz", "RATE": "2",
	})
	if got := env.Int("I", 3); got != 3 {
		t.Errorf("invalid Int returned %d, want the default", got)
	}
	env.Float64("F", 0)
	env.Bool("B", false)
	env.Duration("D", time.Second)
	env.Duration("D2", time.Second)
	env.Level("LV", slog.LevelInfo)
	env.Required("NEEDED")
	env.Fail("DATABASE_URL", "unusable")
	env.Check("RATE", env.Float64("RATE", 0) <= 1, "must be at most 1")
	env.Check("OK", true, "never reported")

	err := env.Err()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Err = %v, want ErrInvalidConfig", err)
	}
	msg := err.Error()
	for _, want := range []string{`I="4x"`, `F="NaN"`, `B="perhaps"`, `D="-1s": must not be negative`, `D2="soon"`,
		`LV="loud"`, "NEEDED: required", "DATABASE_URL: unusable", `RATE="2": must be at most 1`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "hunter2") || strings.Contains(msg, "never reported") {
		t.Errorf("error leaks a secret or reports a passing check:\n%s", msg)
	}
}

func TestLoadConfig(t *testing.T) {
	env := MapEnv(nil)
	c := LoadConfig(env, "shop-api", ":9000")
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	if c.DatabaseName() != "choreo_shop_api" || c.RedisAddr != defaultRedisAddr || c.HTTPAddr != ":9000" ||
		!slices.Equal(c.KafkaBrokers, []string{defaultKafkaBrokers}) || c.KafkaPartitions != defaultKafkaPartitions ||
		c.ShutdownTimeout != defaultShutdownTimeout || c.LogLevel != slog.LevelInfo || c.ConsumerBatch != DefaultConsumerBatch {
		t.Fatalf("defaults: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}

	env = MapEnv(map[string]string{envRedisAddr: "none", envKafkaBrokers: "k1:9092,k2:9092", envLogLevel: "debug"})
	c = LoadConfig(env, "svc", ":1")
	if env.Err() != nil || c.RedisAddr != "" || len(c.KafkaBrokers) != 2 || c.LogLevel != slog.LevelDebug {
		t.Fatalf("overrides: %+v %v", c, env.Err())
	}

	tests := []struct {
		key, value, want string
	}{
		{envDatabaseURL, "postgres://127.0.0.1:5432/", "names no database"},
		{envRedisAddr, "localhost", "not host:port"},
		{envKafkaBrokers, "broker", "is not host:port"},
		{envKafkaPartitions, "0", "at least 1"},
		{envHTTPAddr, "8080", "not [host]:port"},
		{envShutdownTimeout, "0s", "must be positive"},
		{envConsumerBatch, "-1", "must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			env := MapEnv(map[string]string{tc.key: tc.value})
			LoadConfig(env, "svc", ":8080")
			err := env.Err()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %s: %s", err, tc.key, tc.want)
			}
		})
	}
	if err := (Config{}).Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "empty service name") {
		t.Fatalf("zero Config: %v", err)
	}
}

// TestDatabaseConnectionDefaults: the pool's default size follows the documented formula
// (docs/operations.md, "Postgres connections"), and a DATABASE_URL through a
// transaction-mode pooler needs DATABASE_SESSION_URL for the relay's sessions.
func TestDatabaseConnectionDefaults(t *testing.T) {
	for _, tc := range []struct {
		partitions string
		want       int32
	}{{"", 4*defaultKafkaPartitions + 4}, {"1", 8}, {"12", 52}, {"64", 260}} {
		env := MapEnv(map[string]string{envKafkaPartitions: tc.partitions})
		c := LoadConfig(env, "svc", ":1")
		if err := env.Err(); err != nil {
			t.Fatal(err)
		}
		if c.DatabaseMaxConns != tc.want {
			t.Errorf("KAFKA_PARTITIONS=%q: pool size %d, want %d (4×partitions+4)", tc.partitions, c.DatabaseMaxConns, tc.want)
		}
		if c.DatabaseSessionURL != "" || c.sessionURL() != c.DatabaseURL {
			t.Errorf("relay sessions: %q, want DATABASE_URL %q", c.sessionURL(), c.DatabaseURL)
		}
	}
	if env := MapEnv(map[string]string{envKafkaPartitions: "12", envDatabaseConns: "7"}); LoadConfig(env, "svc", ":1").DatabaseMaxConns != 7 {
		t.Error("DATABASE_MAX_CONNS does not win over the default")
	}

	const pooled = "postgres://postgres@127.0.0.1:6432/shop?default_query_exec_mode=cache_describe"
	const direct = "postgres://postgres@127.0.0.1:5432/shop"
	env := MapEnv(map[string]string{envDatabaseURL: pooled})
	LoadConfig(env, "svc", ":1")
	if err := env.Err(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), envDatabaseSession) {
		t.Errorf("a pooled DATABASE_URL without DATABASE_SESSION_URL: err = %v, want one naming %s", err, envDatabaseSession)
	}
	for _, session := range []string{direct, pooled} { // the same URL, set: the operator says it is a session
		env = MapEnv(map[string]string{envDatabaseURL: pooled, envDatabaseSession: session})
		if c := LoadConfig(env, "svc", ":1"); env.Err() != nil || c.sessionURL() != session {
			t.Errorf("DATABASE_SESSION_URL=%s: relay sessions %q, err %v", session, c.sessionURL(), env.Err())
		}
	}
	env = MapEnv(map[string]string{envDatabaseSession: "postgres://127.0.0.1:5432/"})
	LoadConfig(env, "svc", ":1")
	if err := env.Err(); err == nil || !strings.Contains(err.Error(), envDatabaseSession) || !strings.Contains(err.Error(), "names no database") {
		t.Errorf("DATABASE_SESSION_URL without a database: err = %v", err)
	}
}
