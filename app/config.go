package app

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Names of the environment variables [LoadConfig] reads.
const (
	envDatabaseURL      = "DATABASE_URL"
	envDatabaseSession  = "DATABASE_SESSION_URL"
	envDatabaseConns    = "DATABASE_MAX_CONNS"
	envDatabaseMinConns = "DATABASE_MIN_CONNS"
	envRedisAddr        = "REDIS_ADDR"
	envKafkaBrokers     = "KAFKA_BROKERS"
	envKafkaPartitions  = "KAFKA_PARTITIONS"
	envHTTPAddr         = "HTTP_ADDR"
	envLogLevel         = "LOG_LEVEL"
	envShutdownTimeout  = "SHUTDOWN_TIMEOUT"
	envConsumerBatch    = "CONSUMER_BATCH"
	envPprof            = "PPROF"

	envKafkaInstanceID       = "KAFKA_INSTANCE_ID"
	envKafkaSessionTimeout   = "KAFKA_SESSION_TIMEOUT"
	envKafkaRebalanceTimeout = "KAFKA_REBALANCE_TIMEOUT"
)

// EnvVars lists the variables [LoadConfig] reads (OTEL_* aside: see tracing.Setup), for
// deployment manifests and their tests.
func EnvVars() []string {
	return append([]string{envDatabaseURL, envDatabaseSession, envDatabaseConns, envDatabaseMinConns, envRedisAddr, envRedisURL, envRedisTLSCAFile, envKafkaBrokers, envKafkaPartitions,
		envHTTPAddr, envHTTPAllowedHosts, envAdminAddr, envAdminToken, envLogLevel, envShutdownTimeout, envConsumerBatch, envPprof,
		envKafkaInstanceID, envKafkaSessionTimeout, envKafkaRebalanceTimeout, envKafkaCompression,
		envIdempotencyRetention, envDeadLetterRetention, envMaxRecordBytes, envDeadLetterArchiveBytes, envSigningKeyFile, envSigningKey, envTrustedKeys}, kafkaSecurityVars()...)
}

// Defaults of the configuration (the others are in the package documentation).
const (
	// DefaultConsumerBatch is CONSUMER_BATCH when it is not set.
	DefaultConsumerBatch = 64
	// DefaultKafkaCompression is KAFKA_COMPRESSION when it is not set: gzip.
	//
	// A consumer must decode the codec of every batch it reads, and only none and gzip are
	// decoded by the stock consumers of all the mainstream clients: the Java client,
	// librdkafka and its wrappers (confluent-kafka-go, -python, -dotnet), Sarama,
	// franz-go, and kafkajs, which reads gzip natively but needs a codec plugin for snappy,
	// lz4 and zstd (it fails with "Snappy compression not implemented" on franz-go's own
	// default, snappy). Between the two, gzip, measured with BenchmarkKafkaCompression
	// (producer, in-process broker and consumer together, per choreo event of 460 bytes
	// of headers and payload): in batches of 32 events gzip sends 61 bytes per event
	// instead of 460 (7.5 times fewer bytes to store, replicate and fetch) for about 2 µs
	// more CPU per event (7.8 against 5.5 µs, minimum of 5 runs); a batch of one event
	// shrinks to 344 bytes, and the compressor's per-batch set-up costs 10 to 25 µs more
	// CPU, but batches stay that small only while the producer keeps up, that is, while
	// there is CPU to spare. Beside a handled event's Postgres transaction (a round trip
	// alone is 120 to 220 µs) either cost is small. docs/benchmarks.md ("Kafka
	// compression") has every codec's figures and docs/interop.md what each client needs.
	// Choose snappy, lz4 or zstd when every consumer of the topics reads it, none when CPU
	// matters more than bytes.
	DefaultKafkaCompression = "gzip"
	// DefaultMaxHeaderBytes is HTTPLimits.MaxHeaderBytes when it is 0.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxConnsPerClient is HTTPLimits.MaxConnsPerClient when it is 0.
	DefaultMaxConnsPerClient = 256
)

// Other defaults of [LoadConfig].
const (
	defaultRedisAddr       = "127.0.0.1:6379"
	defaultKafkaBrokers    = "127.0.0.1:9092"
	defaultKafkaPartitions = 6
	defaultShutdownTimeout = 30 * time.Second
	// defaultKafkaSessionTimeout is how long the group coordinator waits for a member's
	// heartbeat (sent every 3s) before it gives the member's partitions to the others.
	// It bounds how long the partitions of a killed instance stay unconsumed, and is the
	// time a restarted instance has to take them back under the same instance id without
	// a rebalance. Kafka's default is 45s; a service restarts in seconds.
	defaultKafkaSessionTimeout = 15 * time.Second
	// defaultKafkaRebalanceTimeout is how long a rebalance waits for every member to
	// rejoin, which includes finishing in-flight handlers and committing on revocation
	// (bounded by consumer.DefaultDrainTimeout, 10s). Kafka clients default to 60s.
	defaultKafkaRebalanceTimeout = 30 * time.Second
)

// minSessionTimeout is the brokers' default group.min.session.timeout.ms: shorter
// session timeouts are refused at JoinGroup.
const minSessionTimeout = 6 * time.Second

// maxInstanceIDLen is the longest group.instance.id Kafka accepts.
const maxInstanceIDLen = 249

// Config is the plumbing configuration every service shares. Service-specific settings
// are read next to it with the same [Env], so that one error lists every problem.
type Config struct {
	// Service names the service in logs, telemetry (service.name) and the default
	// database name. Required.
	Service string
	// DatabaseURL is the service's own Postgres database (DATABASE_URL; default
	// postgres://postgres@127.0.0.1:5432/choreo_<service>?sslmode=disable). The database
	// is created at start if it does not exist (see ensureDatabase).
	DatabaseURL string
	// DatabaseSessionURL is where the outbox relay opens its two sessions, the one that
	// holds the leader's session advisory lock and the LISTEN one
	// (DATABASE_SESSION_URL; default "": DatabaseURL). Set it to a direct connection (or a
	// session-mode pool) when DatabaseURL goes through a transaction-mode pooler such as
	// PgBouncer; see "Behind PgBouncer" in docs/operations.md. The service's database is
	// also created through it when missing.
	DatabaseSessionURL string
	// DatabaseMaxConns caps the service's Postgres pool (DATABASE_MAX_CONNS; default
	// defaultDatabaseMaxConns, 4×KafkaPartitions+4: what one instance can use at once).
	// A pool_max_conns parameter in DatabaseURL wins. Each consumer worker holds a
	// connection for its transaction, so a pool smaller than the partitions assigned to
	// the instance makes workers queue. Connections idle for defaultDatabaseIdleTime are
	// closed (pool_max_conn_idle_time or pool_health_check_period in DatabaseURL hand this
	// to pgxpool's own health check); "Postgres connections" in
	// docs/operations.md has the formula per instance and across instances.
	DatabaseMaxConns int32
	// DatabaseMinConns is how many Postgres connections the pool opens before the App
	// is ready (DATABASE_MIN_CONNS; default 0, pgx's: none); they are not kept: like any
	// other, one idle for defaultDatabaseIdleTime is closed. A
	// new Postgres backend costs a process start, and its first statements load
	// catalog caches and prepare statements, so a cold pool makes the first seconds
	// after a start slow; see "Slow first seconds after a start" in docs/operations.md.
	// Capped at the pool size; a pool_min_conns parameter in DatabaseURL wins (pgx's
	// minimum: opened at start and kept while idle).
	DatabaseMinConns int32
	// RedisAddr is the Redis address used for per-entity locks (REDIS_ADDR; default
	// defaultRedisAddr). Empty (REDIS_ADDR=none) runs without Redis and without locks:
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
	// defaultKafkaBrokers).
	KafkaBrokers []string
	// KafkaPartitions is the partition count of topics created at start
	// (KAFKA_PARTITIONS; default defaultKafkaPartitions). Existing topics are left alone.
	KafkaPartitions int32
	// KafkaSecurity is the SASL and TLS setting of every Kafka client of the service
	// (KAFKA_SASL_*, KAFKA_TLS*; see [LoadKafkaSecurity]; default plaintext, no SASL).
	KafkaSecurity KafkaSecurity
	// KafkaCompression is the batch compression of the App's producer, which the outbox
	// relay and dead-lettering share (KAFKA_COMPRESSION: none, gzip, snappy, lz4 or zstd;
	// default DefaultKafkaCompression, gzip, which every mainstream client's consumer
	// reads; "" in a Config built in code means the default).
	KafkaCompression string
	// HTTPAddr is the listen address of the HTTP server with /healthz, /readyz, /metrics
	// and the service's own routes (HTTP_ADDR; the default is the service's).
	HTTPAddr string
	// AllowedHosts are the host names the HTTP listeners (public and admin) answer to
	// besides loopback names and IP addresses (HTTP_ALLOWED_HOSTS, comma-separated;
	// default none): a request for another name is answered 421 (see requireHost).
	// Set it to the names clients use to reach the service (a load balancer's, a
	// Kubernetes Service's), or "*" to turn the check off.
	AllowedHosts []string
	// AdminAddr is the listen address of the admin endpoints /healthz, /readyz (with
	// each check's error) and /metrics (ADMIN_ADDR; default loopback, HTTP_ADDR's port +
	// defaultAdminPortOffset, e.g. 127.0.0.1:9080; none or empty: they stay on HTTPAddr).
	// With an admin listener, HTTPAddr serves /healthz, a /readyz without details and the
	// service's routes, never /metrics.
	AdminAddr string
	// AdminToken is the bearer token /metrics and /debug/pprof/ require
	// ("Authorization: Bearer <token>"), on whichever listener serves them (ADMIN_TOKEN;
	// default none: they answer without one). /healthz and /readyz never need it, so
	// probes stay simple. Pprof on an admin listener beyond loopback requires it (a
	// configuration error otherwise: profiles and the command line are not for every
	// network peer); /metrics beyond loopback without it is served, with a warning at
	// start (Run).
	AdminToken string
	// LogLevel is the minimum level logged (LOG_LEVEL; default info).
	LogLevel slog.Level
	// ShutdownTimeout bounds the whole graceful shutdown (SHUTDOWN_TIMEOUT; default
	// defaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// ConsumerBatch is the most records of one partition a consumer handles in one
	// transaction when they are waiting (CONSUMER_BATCH; default DefaultConsumerBatch; 0
	// or 1 turns batch mode off). Batches form only from records already buffered, so a
	// consumer that keeps up handles records one at a time with no added latency, and one
	// that falls behind shares each commit across up to ConsumerBatch records (see
	// consumer.WithBatch and consumer.StandardBatch).
	ConsumerBatch int
	// Pprof serves net/http/pprof's profiles under /debug/pprof/ on the admin listener
	// (PPROF; default false), for benchmarks and diagnosis. Without an admin listener
	// they are not served at all, so they never reach the public one. On an admin
	// listener beyond loopback they require AdminToken.
	Pprof bool
	// KafkaInstanceID is a static group membership id (group.instance.id, KIP-345) for
	// this instance in every consumer group of the service (KAFKA_INSTANCE_ID; default
	// none: dynamic membership with the cooperative-sticky balancer). A restarted static
	// member that rejoins within KafkaSessionTimeout gets its partitions back without a
	// rebalance, but a static member does not leave its groups when it stops, so a
	// scale-down leaves its partitions unconsumed for the session timeout; measured on
	// Apache Kafka (bench/rebalance), dynamic membership stalls a partition 0.5 s when an
	// instance joins, leaves or restarts, static 0.5 s, 15.5 s and 0.5 s. Two live
	// instances must never share an id (the broker fences the older one). Letters,
	// digits, '.', '_' and '-' only, at most 249 characters; "none" means the default.
	KafkaInstanceID string
	// KafkaSessionTimeout is the consumers' session timeout (KAFKA_SESSION_TIMEOUT;
	// default defaultKafkaSessionTimeout; at least 6s, the brokers' default minimum; 0 in
	// a Config built in code means the default).
	KafkaSessionTimeout time.Duration
	// KafkaRebalanceTimeout is the consumers' rebalance timeout
	// (KAFKA_REBALANCE_TIMEOUT; default defaultKafkaRebalanceTimeout; 0 means the
	// default). Keep it above the consumers' drain timeout (consumer.WithDrainTimeout).
	KafkaRebalanceTimeout time.Duration
	// IdempotencyRetention is how long an idempotency record of the App's default store
	// guards its key (IDEMPOTENCY_RETENTION; default defaultIdempotencyRetention; 0 in a
	// Config built in code means the default). The sweeper deletes records past it,
	// every 5 minutes or every twentieth of the retention if that is shorter. Keep it
	// above the broker's log retention of the consumed topics.
	IdempotencyRetention time.Duration
	// DeadLetterRetention is how long rows of the dead-letter archive are kept
	// (DEAD_LETTER_RETENTION; default defaultDeadLetterRetention; 0 in code means the
	// default). They are deleted hourly, or every twentieth of the retention if that is
	// shorter (see pruneDeadLetters).
	DeadLetterRetention time.Duration
	// MaxRecordBytes is the largest record value the service's consumers decode, and
	// what their fetch limits are set from (MAX_RECORD_BYTES; default
	// consumer.DefaultMaxRecordBytes, 1 MiB; 0 in code means the default; see
	// consumer.FetchLimits): a compressed batch that decompresses past 8 × it is
	// dead-lettered as "too_large" without being decompressed further.
	MaxRecordBytes int
	// DeadLetterArchiveBytes is how much of a value a row of the dead-letter archive keeps
	// (DEAD_LETTER_ARCHIVE_BYTES; default consumer.DefaultArchiveValueBytes, 2 MiB; 0 in
	// code means the default; see consumer.ArchiveValueBytes). Keep it at least
	// MaxRecordBytes, so that every record a handler could apply is archived whole.
	DeadLetterArchiveBytes int
	// Signing is the key the service signs its events with and the keys of the sources
	// whose events must be signed (CHOREO_SIGNING_KEY_FILE, CHOREO_TRUSTED_KEYS; see
	// [Signing]; default neither).
	Signing Signing
}

func validInstanceRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

// defaultDatabaseURL returns the database URL used when DATABASE_URL is unset: database
// choreo_<service> on the local Postgres as user postgres.
func defaultDatabaseURL(service string) string {
	db := "choreo_" + strings.NewReplacer("-", "_", ".", "_").Replace(service)
	return "postgres://postgres@127.0.0.1:5432/" + db + "?sslmode=disable"
}

// LoadConfig reads the shared configuration for service from env; defaultHTTPAddr is
// the service's default listen address (e.g. ":8081"). Problems are recorded in env (see
// [Env.Err]), together with those of [Config.Validate].
func LoadConfig(env *Env, service, defaultHTTPAddr string) Config {
	c := Config{
		Service:          service,
		DatabaseURL:      env.String(envDatabaseURL, defaultDatabaseURL(service)),
		RedisAddr:        env.String(envRedisAddr, defaultRedisAddr),
		RedisURL:         env.String(envRedisURL, ""),
		RedisTLSCAFile:   env.String(envRedisTLSCAFile, ""),
		KafkaBrokers:     env.List(envKafkaBrokers, []string{defaultKafkaBrokers}),
		KafkaPartitions:  int32(env.Int(envKafkaPartitions, defaultKafkaPartitions)),
		KafkaSecurity:    readKafkaSecurity(env),
		KafkaCompression: strings.ToLower(strings.TrimSpace(env.String(envKafkaCompression, DefaultKafkaCompression))),
		HTTPAddr:         env.String(envHTTPAddr, defaultHTTPAddr),
		AllowedHosts:     env.List(envHTTPAllowedHosts, nil),
		AdminAddr:        env.String(envAdminAddr, defaultAdminAddr(env.String(envHTTPAddr, defaultHTTPAddr))),
		LogLevel:         env.Level(envLogLevel, slog.LevelInfo),
		ShutdownTimeout:  env.Duration(envShutdownTimeout, defaultShutdownTimeout),
		ConsumerBatch:    env.Int(envConsumerBatch, DefaultConsumerBatch),
		Pprof:            env.Bool(envPprof, false),
		AdminToken:       env.String(envAdminToken, ""),
	}
	c.DatabaseSessionURL = env.String(envDatabaseSession, "")
	c.DatabaseMaxConns = int32(env.Int(envDatabaseConns, defaultDatabaseMaxConns(int(c.KafkaPartitions))))
	c.DatabaseMinConns = int32(env.Int(envDatabaseMinConns, 0))
	if strings.EqualFold(c.AdminAddr, "none") {
		c.AdminAddr = ""
	}
	c.KafkaInstanceID = env.String(envKafkaInstanceID, "")
	if strings.EqualFold(c.KafkaInstanceID, "none") {
		c.KafkaInstanceID = ""
	}
	c.KafkaSessionTimeout = env.Duration(envKafkaSessionTimeout, defaultKafkaSessionTimeout)
	c.KafkaRebalanceTimeout = env.Duration(envKafkaRebalanceTimeout, defaultKafkaRebalanceTimeout)
	c.readRetention(env)
	c.readLimits(env)
	c.readSigning(env)
	if strings.EqualFold(c.RedisAddr, "none") {
		c.RedisAddr = ""
	}
	if c.RedisURL != "" {
		if _, set := env.raw(envRedisAddr); set {
			env.Fail(envRedisAddr, "set only one of "+envRedisURL+" and "+envRedisAddr)
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
	pooled, dbps := dsnProblems(envDatabaseURL, c.DatabaseURL)
	ps = append(ps, dbps...)
	ps = append(ps, c.sessionURLProblems(pooled)...)
	if c.DatabaseMaxConns < 0 {
		ps = append(ps, problem{envDatabaseConns, "must not be negative (0 keeps the pgx default)"})
	}
	if c.DatabaseMinConns < 0 {
		ps = append(ps, problem{envDatabaseMinConns, "must not be negative"})
	}
	if c.RedisAddr != "" && c.RedisURL == "" {
		if _, _, err := net.SplitHostPort(c.RedisAddr); err != nil {
			ps = append(ps, problem{envRedisAddr, "not host:port (use none to run without Redis, or " + envRedisURL + ")"})
		}
	}
	ps = append(ps, c.redisProblems()...)
	if len(c.KafkaBrokers) == 0 {
		ps = append(ps, problem{envKafkaBrokers, "no seed brokers"})
	}
	for _, b := range c.KafkaBrokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			ps = append(ps, problem{envKafkaBrokers, fmt.Sprintf("%q is not host:port", b)})
		}
	}
	if c.KafkaPartitions < 1 {
		ps = append(ps, problem{envKafkaPartitions, "must be at least 1"})
	}
	ps = append(ps, c.KafkaSecurity.problems()...)
	if _, err := kafkaCodec(c.KafkaCompression); err != nil {
		ps = append(ps, problem{envKafkaCompression, compressionReason})
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		ps = append(ps, problem{envHTTPAddr, "not [host]:port"})
	}
	if p := allowedHostsProblem(c.AllowedHosts); p != "" {
		ps = append(ps, problem{envHTTPAllowedHosts, p})
	}
	if _, _, err := net.SplitHostPort(c.AdminAddr); c.AdminAddr != "" && err != nil {
		ps = append(ps, problem{envAdminAddr, "not [host]:port (or none)"})
	} else if c.Pprof && c.AdminAddr != "" && !Loopback(c.AdminAddr) && c.AdminToken == "" {
		ps = append(ps, problem{envPprof, "serves profiles and the command line on " + envAdminAddr + " " + c.AdminAddr +
			", beyond loopback: set " + envAdminToken + " (a bearer token) or bind " + envAdminAddr + " to loopback"})
	}
	if c.ShutdownTimeout <= 0 {
		ps = append(ps, problem{envShutdownTimeout, "must be positive"})
	}
	if id := c.KafkaInstanceID; id != "" && (len(id) > maxInstanceIDLen || strings.IndexFunc(id, func(r rune) bool { return !validInstanceRune(r) }) >= 0) {
		ps = append(ps, problem{envKafkaInstanceID, "letters, digits, '.', '_' and '-' only, at most 249 characters (none for dynamic membership)"})
	}
	if c.KafkaSessionTimeout != 0 && c.KafkaSessionTimeout < minSessionTimeout {
		ps = append(ps, problem{envKafkaSessionTimeout, "must be at least 6s (the brokers' default group.min.session.timeout.ms)"})
	}
	if c.KafkaRebalanceTimeout < 0 {
		ps = append(ps, problem{envKafkaRebalanceTimeout, "must not be negative"})
	}
	ps = append(ps, c.retentionProblems()...)
	ps = append(ps, c.limitsProblems()...)
	if c.ConsumerBatch < 0 {
		ps = append(ps, problem{envConsumerBatch, "must not be negative (0 or 1 turns batch mode off)"})
	}
	return ps
}

// Validate reports every problem of c, each matching [ErrInvalidConfig]. Use it for a Config
// built in code; [LoadConfig] already records the same problems in its Env.
func (c Config) Validate() error {
	var errs []error
	for _, p := range c.problems() {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, p.key, p.reason))
	}
	return errors.Join(errs...)
}

// sessionURL is where the relay's sessions connect: DatabaseSessionURL, or DatabaseURL.
func (c Config) sessionURL() string {
	if c.DatabaseSessionURL != "" {
		return c.DatabaseSessionURL
	}
	return c.DatabaseURL
}

// DatabaseName returns the database named by c.DatabaseURL, or "" if it does not parse.
func (c Config) DatabaseName() string {
	cfg, err := pgx.ParseConfig(c.DatabaseURL)
	if err != nil {
		return ""
	}
	return cfg.Database
}

// defaultDatabaseMaxConns is DATABASE_MAX_CONNS when it is not set (see
// Config.DatabaseMaxConns): what one instance can use at once, 4×partitions+4. A
// consumer worker holds a connection while its transaction runs, one worker per
// partition the instance owns, and a service's consumer group reads two topics and their
// two retry topics, each of partitions partitions: 4×partitions when the instance is alone
// in its group (others dead or not started). The 4 are for the work beside the consumers
// that shares the pool, each at most one statement or transaction at a time: the
// idempotency sweeper, the dead-letter pruner, the coalesced NOTIFY of Outbox.Wake and the
// readiness check (the relay's backlog gauge too, when scraped). The outbox relay's
// sessions are outside the pool (1, 2 on the leader). The formula, and what it means
// across instances, is in docs/operations.md ("Postgres connections").
func defaultDatabaseMaxConns(partitions int) int { return 4*partitions + 4 }

// defaultDatabaseIdleTime is how long a pool connection stays open unused before it is
// closed (down to a pool_min_conns of the URL, if any), checked every
// defaultDatabaseIdleCheck by a poolidle.Closer; pgx's own default is 30 minutes, and its
// health check hands the least recently used connections out first, so under bursts a
// pool kept every connection its largest burst opened. The Closer keeps the most
// recently used in front: a steady load keeps the connections it uses, and a burst's
// surplus is closed 1 to 1.25 minutes after the burst.
const (
	defaultDatabaseIdleTime  = time.Minute
	defaultDatabaseIdleCheck = 15 * time.Second
)

// queryModeParam is pgx's connection-string parameter of the query mode.
const queryModeParam = "default_query_exec_mode"

// sessionURLProblems checks DATABASE_SESSION_URL. A DATABASE_URL that asks for a query
// mode without named prepared statements is behind a transaction-mode pooler, where the
// relay's leader lock and LISTEN would not hold: then DATABASE_SESSION_URL must be set
// (to DATABASE_URL itself, if that is a real session after all).
func (c Config) sessionURLProblems(pooled *pgx.ConnConfig) []problem {
	if c.DatabaseSessionURL != "" {
		_, ps := dsnProblems(envDatabaseSession, c.DatabaseSessionURL)
		return ps
	}
	if pooled != nil && pooled.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return []problem{{envDatabaseSession, envDatabaseURL + " sets " + queryModeParam +
			" (a transaction-mode pooler?): set it to a direct connection for the outbox relay's leader lock and LISTEN"}}
	}
	return nil
}

// dsnProblems parses the Postgres connection string dsn of the variable key: its
// configuration (nil if it does not parse) and what is wrong with it.
func dsnProblems(key, dsn string) (*pgx.ConnConfig, []problem) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, []problem{{key, "not a Postgres connection string"}}
	}
	if cfg.Database == "" {
		return cfg, []problem{{key, "names no database"}}
	}
	return cfg, nil
}
