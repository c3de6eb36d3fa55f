package app

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Names of the environment variables [LoadConfig] reads.
const (
	EnvDatabaseURL     = "DATABASE_URL"
	EnvDatabaseConns   = "DATABASE_MAX_CONNS"
	EnvRedisAddr       = "REDIS_ADDR"
	EnvKafkaBrokers    = "KAFKA_BROKERS"
	EnvKafkaPartitions = "KAFKA_PARTITIONS"
	EnvHTTPAddr        = "HTTP_ADDR"
	EnvLogLevel        = "LOG_LEVEL"
	EnvJaegerUIURL     = "JAEGER_UI_URL"
	EnvShutdownTimeout = "SHUTDOWN_TIMEOUT"
	EnvConsumerBatch   = "CONSUMER_BATCH"
)

// EnvVars lists the variables [LoadConfig] reads (OTEL_* aside: see tracing.Setup), for
// deployment manifests and their tests.
func EnvVars() []string {
	return append([]string{EnvDatabaseURL, EnvDatabaseConns, EnvRedisAddr, EnvRedisURL, EnvRedisTLSCAFile, EnvKafkaBrokers, EnvKafkaPartitions,
		EnvHTTPAddr, EnvAdminAddr, EnvLogLevel, EnvJaegerUIURL, EnvShutdownTimeout, EnvConsumerBatch}, kafkaSecurityVars()...)
}

// Defaults of [LoadConfig].
const (
	DefaultRedisAddr       = "127.0.0.1:6379"
	DefaultKafkaBrokers    = "127.0.0.1:9092"
	DefaultKafkaPartitions = 6
	DefaultJaegerUIURL     = "http://localhost:16686"
	DefaultShutdownTimeout = 30 * time.Second
	DefaultConsumerBatch   = 16
)

// Config is the plumbing configuration every service shares. Service-specific settings
// are read next to it with the same [Env], so that one error lists every problem.
type Config struct {
	// Service names the service in logs, telemetry (service.name) and the default
	// database name. Required.
	Service string
	// DatabaseURL is the service's own Postgres database (DATABASE_URL; default
	// postgres://postgres@127.0.0.1:5432/choreo_<service>?sslmode=disable). The database
	// is created at start if it does not exist (see [EnsureDatabase]).
	DatabaseURL string
	// DatabaseMaxConns caps the service's Postgres pool (DATABASE_MAX_CONNS; default
	// 4×KafkaPartitions+4, enough for one transaction per partition of a consumer group
	// reading two topics, plus HTTP). A pool_max_conns parameter in DatabaseURL wins.
	// Each consumer worker holds a connection for its transaction, so a pool smaller than
	// the partitions assigned to the instance makes workers queue.
	DatabaseMaxConns int32
	// RedisAddr is the Redis address used for per-entity locks (REDIS_ADDR; default
	// DefaultRedisAddr). Empty (REDIS_ADDR=none) runs without Redis and without locks:
	// the Postgres transaction alone guards correctness.
	RedisAddr string
	// RedisURL is the Redis server as a URL (REDIS_URL):
	// redis://[user:password@]host[:port][/db], or rediss:// for TLS. It wins over
	// RedisAddr, which is a shorthand for redis://RedisAddr/0 without password; set only
	// one of the two variables. It is never printed with its credentials.
	RedisURL string
	// RedisTLSCAFile is a PEM file of the CAs that sign the Redis server's certificate
	// with a rediss:// RedisURL (REDIS_TLS_CA_FILE; default the system's roots).
	RedisTLSCAFile string
	// KafkaBrokers are the seed brokers (KAFKA_BROKERS, comma-separated; default
	// DefaultKafkaBrokers).
	KafkaBrokers []string
	// KafkaPartitions is the partition count of topics created at start
	// (KAFKA_PARTITIONS; default DefaultKafkaPartitions). Existing topics are left alone.
	KafkaPartitions int32
	// KafkaSecurity is the SASL and TLS setting of every Kafka client of the service
	// (KAFKA_SASL_*, KAFKA_TLS*; see [LoadKafkaSecurity]; default plaintext, no SASL).
	KafkaSecurity KafkaSecurity
	// HTTPAddr is the listen address of the HTTP server with /healthz, /readyz, /metrics
	// and the service's own routes (HTTP_ADDR; the default is the service's).
	HTTPAddr string
	// AdminAddr is the listen address of the admin endpoints /healthz, /readyz (with
	// each check's error) and /metrics (ADMIN_ADDR; default loopback, HTTP_ADDR's port +
	// DefaultAdminPortOffset, e.g. 127.0.0.1:9080; none or empty: they stay on HTTPAddr).
	// With an admin listener, HTTPAddr serves /healthz, a /readyz without details and the
	// service's routes, never /metrics.
	AdminAddr string
	// LogLevel is the minimum level logged (LOG_LEVEL; default info).
	LogLevel slog.Level
	// JaegerUIURL is the base URL of the trace UI, for links to a saga's trace
	// (JAEGER_UI_URL; default DefaultJaegerUIURL).
	JaegerUIURL string
	// ShutdownTimeout bounds the whole graceful shutdown (SHUTDOWN_TIMEOUT; default
	// DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// ConsumerBatch is the most records of one partition a consumer handles in one
	// transaction when they are waiting (CONSUMER_BATCH; default DefaultConsumerBatch; 0
	// or 1 turns batch mode off). Batches form only from records already buffered, so a
	// consumer that keeps up handles records one at a time with no added latency, and one
	// that falls behind shares each commit across up to ConsumerBatch records (see
	// consumer.WithBatch and consumer.StandardBatch).
	ConsumerBatch int
}

// DefaultDatabaseURL returns the database URL used when DATABASE_URL is unset: database
// choreo_<service> on the local Postgres as user postgres.
func DefaultDatabaseURL(service string) string {
	db := "choreo_" + strings.NewReplacer("-", "_", ".", "_").Replace(service)
	return "postgres://postgres@127.0.0.1:5432/" + db + "?sslmode=disable"
}

// LoadConfig reads the shared configuration for service from env; defaultHTTPAddr is
// the service's default listen address (e.g. ":8081"). Problems are recorded in env (see
// [Env.Err]), together with those of [Config.Validate].
func LoadConfig(env *Env, service, defaultHTTPAddr string) Config {
	c := Config{
		Service:         service,
		DatabaseURL:     env.String(EnvDatabaseURL, DefaultDatabaseURL(service)),
		RedisAddr:       env.String(EnvRedisAddr, DefaultRedisAddr),
		RedisURL:        env.String(EnvRedisURL, ""),
		RedisTLSCAFile:  env.String(EnvRedisTLSCAFile, ""),
		KafkaBrokers:    env.List(EnvKafkaBrokers, []string{DefaultKafkaBrokers}),
		KafkaPartitions: int32(env.Int(EnvKafkaPartitions, DefaultKafkaPartitions)),
		KafkaSecurity:   readKafkaSecurity(env),
		HTTPAddr:        env.String(EnvHTTPAddr, defaultHTTPAddr),
		AdminAddr:       env.String(EnvAdminAddr, defaultAdminAddr(env.String(EnvHTTPAddr, defaultHTTPAddr))),
		LogLevel:        env.Level(EnvLogLevel, slog.LevelInfo),
		JaegerUIURL:     env.String(EnvJaegerUIURL, DefaultJaegerUIURL),
		ShutdownTimeout: env.Duration(EnvShutdownTimeout, DefaultShutdownTimeout),
		ConsumerBatch:   env.Int(EnvConsumerBatch, DefaultConsumerBatch),
	}
	c.DatabaseMaxConns = int32(env.Int(EnvDatabaseConns, int(4*c.KafkaPartitions+4)))
	if strings.EqualFold(c.AdminAddr, "none") {
		c.AdminAddr = ""
	}
	if strings.EqualFold(c.RedisAddr, "none") {
		c.RedisAddr = ""
	}
	if c.RedisURL != "" {
		if _, set := env.raw(EnvRedisAddr); set {
			env.Fail(EnvRedisAddr, "set only one of "+EnvRedisURL+" and "+EnvRedisAddr)
		}
		c.RedisAddr = ""
	}
	for _, err := range c.problems() {
		env.Fail(err.key, err.reason)
	}
	return c
}

type problem struct{ key, reason string }

func (c Config) problems() []problem {
	var ps []problem
	if c.Service == "" {
		ps = append(ps, problem{"service", "empty service name"})
	}
	if cfg, err := pgx.ParseConfig(c.DatabaseURL); err != nil {
		ps = append(ps, problem{EnvDatabaseURL, "not a Postgres connection string"})
	} else if cfg.Database == "" {
		ps = append(ps, problem{EnvDatabaseURL, "names no database"})
	}
	if c.DatabaseMaxConns < 0 {
		ps = append(ps, problem{EnvDatabaseConns, "must not be negative (0 keeps the pgx default)"})
	}
	if c.RedisAddr != "" && c.RedisURL == "" {
		if _, _, err := net.SplitHostPort(c.RedisAddr); err != nil {
			ps = append(ps, problem{EnvRedisAddr, "not host:port (use none to run without Redis, or " + EnvRedisURL + ")"})
		}
	}
	ps = append(ps, c.redisProblems()...)
	if len(c.KafkaBrokers) == 0 {
		ps = append(ps, problem{EnvKafkaBrokers, "no seed brokers"})
	}
	for _, b := range c.KafkaBrokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			ps = append(ps, problem{EnvKafkaBrokers, fmt.Sprintf("%q is not host:port", b)})
		}
	}
	if c.KafkaPartitions < 1 {
		ps = append(ps, problem{EnvKafkaPartitions, "must be at least 1"})
	}
	ps = append(ps, c.KafkaSecurity.problems()...)
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		ps = append(ps, problem{EnvHTTPAddr, "not [host]:port"})
	}
	if _, _, err := net.SplitHostPort(c.AdminAddr); c.AdminAddr != "" && err != nil {
		ps = append(ps, problem{EnvAdminAddr, "not [host]:port (or none)"})
	}
	if u, err := url.Parse(c.JaegerUIURL); c.JaegerUIURL != "" && (err != nil || u.Scheme == "" || u.Host == "") {
		ps = append(ps, problem{EnvJaegerUIURL, "not an absolute URL"})
	}
	if c.ShutdownTimeout <= 0 {
		ps = append(ps, problem{EnvShutdownTimeout, "must be positive"})
	}
	if c.ConsumerBatch < 0 {
		ps = append(ps, problem{EnvConsumerBatch, "must not be negative (0 or 1 turns batch mode off)"})
	}
	return ps
}

// Validate reports every problem of c, each matching [ErrConfig]. Use it for a Config
// built in code; [LoadConfig] already records the same problems in its Env.
func (c Config) Validate() error {
	var errs []error
	for _, p := range c.problems() {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrConfig, p.key, p.reason))
	}
	return errors.Join(errs...)
}

// DatabaseName returns the database named by c.DatabaseURL, or "" if it does not parse.
func (c Config) DatabaseName() string {
	cfg, err := pgx.ParseConfig(c.DatabaseURL)
	if err != nil {
		return ""
	}
	return cfg.Database
}
