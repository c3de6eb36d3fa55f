package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/lock"
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
	for _, step := range []func(context.Context, []tracing.InstrumentOption) error{
		a.connectPostgres, // the pool, warmed and pinged
		a.prepareTables,   // the outbox, idempotency store and archive, and their tables
		a.connectRedis,    // the client and the locker, when Redis is configured
		a.connectKafka,    // the shared producer, its credentials checked
		a.prepareWorkers,  // the outbox relay and the sweepers
	} {
		if err := step(ctx, inst); err != nil {
			return nil, err
		}
	}
	return a, nil
}
