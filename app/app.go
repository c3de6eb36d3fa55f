package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/tracing"
)

// Sentinel errors.
var (
	// ErrInvalidConfig is matched (errors.Is) by every configuration error: one reported
	// by [Env.Err] for a variable that is malformed or out of range, one returned by
	// [Config.Validate], [New] or an option. Retrying does not help: fix the configuration.
	ErrInvalidConfig = errors.New("app: invalid configuration")
	// ErrRunning is returned by Run when the App already ran. A programming error:
	// retrying does not help.
	ErrRunning = errors.New("app: already running or stopped")
	// ErrComponent wraps the error of a component (consumer, relay, background function,
	// HTTP server) that stopped on its own before shutdown began; Run then shuts the
	// service down and returns it. Restarting the service is the retry.
	ErrComponent = errors.New("app: component failed")
	// ErrNotReady is reported by /readyz before the service has started all its
	// components and once shutdown has begun. Transient before start: ask again.
	ErrNotReady = errors.New("app: not ready")
	// ErrUndeclared is returned by [App.Publish] for an event whose (topic, type, schema
	// version) the service did not declare with [App.Produces]. A programming error:
	// retrying does not help.
	ErrUndeclared = errors.New("app: event not declared (App.Produces)")
)

// readyTimeout bounds each /readyz check.
const readyTimeout = 2 * time.Second

// ensureTopicsTimeout bounds the creation of the consumers' dead-letter topics in Run.
const ensureTopicsTimeout = 30 * time.Second

// kafkaAuthTimeout bounds New's first connection to a broker that requires SASL or TLS.
const kafkaAuthTimeout = 15 * time.Second

type component struct {
	name string
	run  func(ctx context.Context) error
	// early reports whether returning before shutdown is an error even when run
	// returned nil (consumers and the relay run until cancelled).
	mustRun bool
}

// App is one choreo service: its connections, its HTTP server, its consumers, its
// outbox relay, its background functions, and their ordered shutdown. Build it with New,
// register event handlers (Handle), HTTP routes (HandleHTTP) and background functions
// (Go), then call Run. The exported fields are ready after New, for code that drops
// down to the building blocks.
type App struct {
	// Config is the configuration the App was built with.
	Config Config
	// Logger is the service's structured logger.
	Logger *slog.Logger
	// Telemetry holds the tracer and meter providers and the Prometheus registry. Unless
	// WithTelemetry or tracing.WithoutGlobals says otherwise they are also the otel
	// globals, so code that creates spans or instruments needs nothing passed to it.
	Telemetry *tracing.Telemetry
	// Pool is the instrumented pool on the service's database, where New applied the
	// library's migrations (package migrate) for Store, Outbox and the archive, and the
	// service's own (WithSchema).
	Pool *pgxpool.Pool
	// Redis is the instrumented Redis client; nil when Config.RedisAddr and
	// Config.RedisURL are empty.
	Redis *redis.Client
	// Kafka is the producer shared by the outbox relay and dead-lettering: idempotent,
	// acks=all.
	Kafka *kgo.Client
	// Outbox stores events in handler transactions (Publish); the App's relay publishes
	// them and consumers wake it after each commit.
	Outbox *outbox.Outbox
	// Locker serialises work per entity; nil without Redis.
	Locker *lock.Locker
	// Store is the idempotency store of the consumers.
	Store *idempotency.Store
	// Router routes the events of the consumer group of Handle, which registers on it.
	// Add trust rules (Router.Trust, Router.Subjects) or types to ignore on it before Run.
	Router *consumer.Router

	opts      options
	kafkaOpts []kgo.Opt // security and WithKafkaOptions, for every client
	ownTel    bool
	mux       *http.ServeMux
	checks    []namedCheck
	relay     *outbox.Relay
	archive   *consumer.DeadLetterArchive // the default dead-letter archive, migrated by New
	topics    []string                    // to create in Run: consumed, their .dlq, declared
	consumers []component
	workers   []component
	kit       kit // Handle's registrations (handle.go)

	state     atomic.Int32 // stateNew, stateRunning, stateStopping
	ran       atomic.Bool
	ready     chan struct{}
	addr      atomic.Pointer[string]
	adminAddr atomic.Pointer[string]
	closeOnce sync.Once
}

const (
	stateNew int32 = iota
	stateRunning
	stateStopping
)

// defaultHTTPAddr is HTTP_ADDR when New reads the environment and it is unset.
const defaultHTTPAddr = ":8080"

// New builds the service named service and connects it. The configuration comes from the
// environment ([LoadConfig] with defaultHTTPAddr; [WithEnv] names another source,
// [WithConfig] gives it in code); every problem of it is returned at once, each
// matching [ErrInvalidConfig]. Then: telemetry (tracing.Setup, installed as the otel
// globals), the logger, the database (created if missing, then the library's migrations
// for the tables of Store, Outbox and the dead-letter archive, see package migrate, and
// the service's own, [WithSchema]), Redis (pinged) with a [lock.Locker], and the Kafka
// producer (with Config.KafkaSecurity: connected once, so that a broker refusing the
// credentials or the certificate fails New). Nothing is served or consumed until Run. If
// New fails, everything it opened is closed again.
func New(ctx context.Context, service string, opts ...Option) (a *App, err error) {
	o := options{signals: true, sweeper: true, ensureDB: true, logOutput: os.Stderr, entityAttr: consumer.DefaultEntityAttribute}
	var problems []error
	for _, opt := range opts {
		problems = append(problems, opt(&o))
	}
	cfg, err := o.resolve(service)
	if err = errors.Join(append(problems, err)...); err != nil {
		return nil, err
	}
	a = &App{Config: cfg, opts: o, mux: http.NewServeMux(), ready: make(chan struct{}),
		Router: consumer.NewRouter(), kit: newKit()}
	if !o.deadUnknown {
		a.Router.IgnoreUnknown()
	}
	a.topics = append(a.topics, o.topics...)
	self := a // "return nil, err" clears a before the deferred cleanup runs
	defer func() {
		if err != nil {
			_ = self.closeResources(context.Background())
			a = nil
		}
	}()

	a.Logger = newLogger(o.logOutput, cfg.LogLevel, cfg.Service)
	a.Telemetry = o.telemetry
	if a.Telemetry == nil {
		if a.Telemetry, err = tracing.Setup(ctx, cfg.Service, o.tracingOpts...); err != nil {
			return nil, fmt.Errorf("app: telemetry: %w", err)
		}
		a.ownTel = true
	}
	inst := []tracing.InstrumentOption{
		tracing.WithTracerProvider(a.Telemetry.TracerProvider),
		tracing.WithMeterProvider(a.Telemetry.MeterProvider),
		tracing.WithPropagator(a.Telemetry.Propagator),
	}

	if o.ensureDB {
		if err := ensureDatabase(ctx, cfg.DatabaseURL); err != nil {
			return nil, err
		}
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: not a Postgres connection string", ErrInvalidConfig, envDatabaseURL)
	}
	if cfg.DatabaseMaxConns > 0 && !strings.Contains(cfg.DatabaseURL, "pool_max_conns") {
		pcfg.MaxConns = cfg.DatabaseMaxConns
	}
	if cfg.DatabaseMinConns > 0 && !strings.Contains(cfg.DatabaseURL, "pool_min_conns") {
		pcfg.MinConns = min(cfg.DatabaseMinConns, pcfg.MaxConns)
	}
	if o.poolConfig != nil {
		o.poolConfig(pcfg)
	}
	tracing.InstrumentPostgres(pcfg, inst...)
	if a.Pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, fmt.Errorf("app: postgres: %w", err)
	}
	if err := tracing.RecordPoolStats(a.Pool, inst...); err != nil {
		a.Pool.Close()
		return nil, fmt.Errorf("app: postgres: %w", err)
	}
	// The warm-up first: pgxpool opens MinConns in the background from here, and a ping
	// racing them could be refused by a server or role at its connection limit although
	// the warm-up got connections; after it, the ping uses one of them.
	a.warmPool(ctx)
	if err := a.Pool.Ping(ctx); err != nil {
		return nil, fmt.Errorf("app: postgres database %q: %w", cfg.DatabaseName(), err)
	}

	a.Outbox = o.outbox
	if a.Outbox == nil {
		obOpts := []outbox.Option{outbox.WithNotifier(a.Pool)}
		if cfg.Signing.Signer != nil {
			obOpts = append(obOpts, outbox.WithSigner(cfg.Signing.Signer))
		}
		if a.Outbox, err = outbox.New(obOpts...); err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
	}
	if a.archive, err = consumer.NewDeadLetterArchive(a.Pool, "", consumer.ArchiveValueBytes(cfg.deadLetterArchiveBytes())); err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	a.Store = o.store
	if a.Store == nil {
		if a.Store, err = idempotency.NewStore(idempotency.WithRetention(cfg.idempotencyRetention())); err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
	}
	// The tables of the store, outbox and archive the App uses, whatever their names.
	err = migrate.Up(ctx, a.Pool, migrate.WithIdempotencyTable(a.Store.TableName()),
		migrate.WithOutboxTable(a.Outbox.TableName()), migrate.WithDeadLetterTable(a.archive.TableName()))
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	for _, sc := range o.schemas {
		if err := MigrateSQL(ctx, a.Pool, sc.name, sc.script); err != nil {
			return nil, err
		}
	}
	a.checks = append(a.checks, namedCheck{"postgres", postgresCheck(a.Pool)})

	ro, err := cfg.redisOptions()
	if err != nil {
		return nil, err
	}
	if ro != nil {
		if o.redisOptions != nil {
			o.redisOptions(ro)
		}
		a.Redis = redis.NewClient(ro)
		if err := tracing.InstrumentRedis(a.Redis, inst...); err != nil {
			return nil, fmt.Errorf("app: redis: %w", err)
		}
		if err := a.Redis.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("app: redis %s: %w%s", cfg.redisTarget(), err, redisAuthHint(err))
		}
		lo := append([]lock.Option{lock.WithNamespace(lock.DefaultNamespace + cfg.Service + ":")}, o.lockOpts...)
		if a.Locker, err = lock.New(a.Redis, lo...); err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
		a.checks = append(a.checks, namedCheck{"redis", redisCheck(a.Redis)})
	}

	secOpts, err := cfg.KafkaSecurity.Options()
	if err != nil {
		return nil, err
	}
	if cfg.KafkaSecurity.SASLMechanism == saslPlain && !cfg.KafkaSecurity.TLS {
		a.Logger.Warn("app: SASL PLAIN without TLS sends the Kafka password in clear text; set KAFKA_TLS=on")
	}
	a.kafkaOpts = append(secOpts, o.kafkaOpts...)
	compression, err := KafkaCompressionOption(cfg.KafkaCompression)
	if err != nil {
		return nil, err
	}
	kopts := append([]kgo.Opt{kgo.SeedBrokers(cfg.KafkaBrokers...), kgo.ClientID(cfg.Service), compression}, a.kafkaOpts...)
	if a.Kafka, err = kgo.NewClient(kopts...); err != nil {
		return nil, fmt.Errorf("app: kafka client: %w", err)
	}
	if cfg.KafkaSecurity.Enabled() {
		// A wrong password or certificate is a configuration error: report it now, not
		// as consumers and a relay that retry forever.
		pctx, cancel := context.WithTimeout(ctx, kafkaAuthTimeout)
		err := a.Kafka.Ping(pctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("app: kafka %s: cannot connect with %s%s: %w",
				strings.Join(cfg.KafkaBrokers, ","), cfg.KafkaSecurity, kafkaAuthHint(cfg.KafkaSecurity, err), err)
		}
	}
	a.checks = append(a.checks, namedCheck{"kafka", kafkaCheck(a.Kafka)})

	a.relay, err = outbox.NewRelay(a.Pool, a.Kafka, a.Outbox, append([]outbox.RelayOption{
		outbox.WithTracerProvider(a.Telemetry.TracerProvider),
		outbox.WithMeterProvider(a.Telemetry.MeterProvider),
		outbox.WithLogger(a.Logger),
	}, o.relayOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	if o.sweeper {
		sw, err := idempotency.NewSweeper(a.Pool, idempotency.WithTable(a.Store.TableName()))
		if err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
		a.workers = append(a.workers, component{name: "idempotency sweeper", run: sw.Run, mustRun: true},
			component{name: "dead-letter archive pruner", run: a.deadLetterPruner, mustRun: true})
	}
	return a, nil
}
