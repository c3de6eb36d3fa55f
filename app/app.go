package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/tracing"
)

// Sentinel errors.
var (
	// ErrRunning is returned by Run when the App already ran.
	ErrRunning = errors.New("app: already running or stopped")
	// ErrComponent wraps the error of a component (consumer, relay, background function,
	// HTTP server) that stopped on its own before shutdown began; Run then shuts the
	// service down and returns it.
	ErrComponent = errors.New("app: component failed")
)

// ReadyTimeout bounds each /readyz check.
const ReadyTimeout = 2 * time.Second

// ensureTopicsTimeout bounds the creation of the consumers' dead-letter topics in Run.
const ensureTopicsTimeout = 30 * time.Second

// kafkaAuthTimeout bounds New's first connection to a broker that requires SASL or TLS.
const kafkaAuthTimeout = 15 * time.Second

type options struct {
	logger       *slog.Logger
	logOutput    io.Writer
	telemetry    *tracing.Telemetry
	tracingOpts  []tracing.Option
	signals      bool
	kafkaOpts    []kgo.Opt
	outbox       *outbox.Outbox
	lockOpts     []lock.Option
	relayOpts    []outbox.RelayOption
	entityAttr   string
	sweeper      bool
	ensureDB     bool
	store        *idempotency.Store
	poolConfig   func(*pgxpool.Config)
	redisOptions func(*redis.Options)
	listener     net.Listener
	// httpserver.go
	adminListener net.Listener
	httpLimits    HTTPLimits
}

// Option configures New.
type Option func(*options)

// WithLogger sets the logger. Default: [NewLogger] writing to the log output (see
// [WithLogOutput]) at Config.LogLevel.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithLogOutput sets where the default logger writes. Default os.Stderr.
func WithLogOutput(w io.Writer) Option { return func(o *options) { o.logOutput = w } }

// WithTelemetry uses tel instead of calling tracing.Setup; the caller keeps ownership
// and shuts it down. Default: tracing.Setup(ctx, Config.Service, tracing options), shut
// down (flushed) as the last step of Run.
func WithTelemetry(tel *tracing.Telemetry) Option { return func(o *options) { o.telemetry = tel } }

// WithTracingOptions adds options for the default tracing.Setup, e.g.
// tracing.WithoutGlobals() or tracing.WithSpanProcessor(recorder) in tests.
func WithTracingOptions(opts ...tracing.Option) Option {
	return func(o *options) { o.tracingOpts = append(o.tracingOpts, opts...) }
}

// WithoutSignals stops Run from shutting down on SIGINT and SIGTERM; only its context
// does. Default: both signals start the graceful shutdown.
func WithoutSignals() Option { return func(o *options) { o.signals = false } }

// WithKafkaOptions adds franz-go options (TLS, SASL, client id, ...) to every Kafka
// client of the App: the producer shared by the outbox relay and dead-lettering, and
// each consumer's client (before ConsumerSpec.Options). They come after the options of
// Config.KafkaSecurity. The producer must stay an idempotent producer with acks=all (the
// defaults), or the relay refuses it. Default: none.
func WithKafkaOptions(opts ...kgo.Opt) Option {
	return func(o *options) { o.kafkaOpts = append(o.kafkaOpts, opts...) }
}

// WithOutbox sets the outbox (for a custom table, which New migrates). Default: outbox.New with a
// Notifier on the pool, so a Wake reaches a relay leading in another instance too.
func WithOutbox(ob *outbox.Outbox) Option { return func(o *options) { o.outbox = ob } }

// WithLockOptions adds options of the Redis locker. Default: the lock package's
// defaults with the namespace "choreo:lock:<service>:".
func WithLockOptions(opts ...lock.Option) Option {
	return func(o *options) { o.lockOpts = append(o.lockOpts, opts...) }
}

// WithRelayOptions adds outbox relay options (batch size, poll interval, ...).
func WithRelayOptions(opts ...outbox.RelayOption) Option {
	return func(o *options) { o.relayOpts = append(o.relayOpts, opts...) }
}

// WithEntityAttribute names the entity id in spans and logs of consumers and of the
// relay, e.g. "order.id". Default consumer.DefaultEntityAttribute ("entity.id").
func WithEntityAttribute(name string) Option { return func(o *options) { o.entityAttr = name } }

// WithoutSweeper disables the background idempotency sweeper and the dead-letter archive
// pruner (for services whose records are swept elsewhere). Default: one of each per App
// (Config.IdempotencyRetention, Config.DeadLetterRetention).
func WithoutSweeper() Option { return func(o *options) { o.sweeper = false } }

// WithoutCreateDatabase stops New from creating a missing database (for users without
// the CREATEDB privilege). Default: the database is created if missing.
func WithoutCreateDatabase() Option { return func(o *options) { o.ensureDB = false } }

// WithIdempotencyStore sets the idempotency store of consumers; New migrates its table
// and the sweeper sweeps it. Default idempotency.NewStore().
func WithIdempotencyStore(s *idempotency.Store) Option { return func(o *options) { o.store = s } }

// WithPoolConfig adjusts the Postgres pool configuration (size, timeouts) before the
// pool opens.
func WithPoolConfig(f func(*pgxpool.Config)) Option { return func(o *options) { o.poolConfig = f } }

// WithRedisOptions adjusts the Redis client options before the client is created.
func WithRedisOptions(f func(*redis.Options)) Option {
	return func(o *options) { o.redisOptions = f }
}

// WithListener makes Run serve HTTP on ln instead of listening on Config.HTTPAddr
// (tests, socket activation). Run closes it.
func WithListener(ln net.Listener) Option { return func(o *options) { o.listener = ln } }

type component struct {
	name string
	run  func(ctx context.Context) error
	// early reports whether returning before shutdown is an error even when run
	// returned nil (consumers and the relay run until cancelled).
	mustRun bool
}

// App is one running choreo service: its connections, its HTTP server, its consumers,
// its outbox relay and its background functions, and their ordered shutdown. Build it
// with New, register routes (Handle), consumers (Consume) and background functions (Go),
// then call Run. The exported fields are ready to use after New.
type App struct {
	// Config is the configuration the App was built with.
	Config Config
	// Logger is the service's structured logger.
	Logger *slog.Logger
	// Telemetry holds the tracer and meter providers and the Prometheus registry.
	Telemetry *tracing.Telemetry
	// Pool is the instrumented pool on the service's database, where New applied the
	// library's migrations (package migrate) for Store, Outbox and the archive.
	Pool *pgxpool.Pool
	// Redis is the instrumented Redis client; nil when Config.RedisAddr and
	// Config.RedisURL are empty.
	Redis *redis.Client
	// Kafka is the producer shared by the outbox relay and dead-lettering: idempotent,
	// acks=all.
	Kafka *kgo.Client
	// Outbox stores events in handler transactions; the App's relay publishes them and
	// consumers wake it after each commit.
	Outbox *outbox.Outbox
	// Locker serialises work per entity; nil without Redis.
	Locker *lock.Locker
	// Store is the idempotency store of the consumers.
	Store *idempotency.Store

	opts      options
	kafkaOpts []kgo.Opt // security and WithKafkaOptions, for every client
	ownTel    bool
	mux       *http.ServeMux
	checks    []NamedCheck
	relay     *outbox.Relay
	archive   *consumer.DeadLetterArchive // the default dead-letter archive, migrated by New
	dlqTopics []string                    // dead-letter and retry topics of the consumers; Run creates them if missing
	consumers []component
	workers   []component

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

// New validates cfg and connects the service: telemetry (tracing.Setup), logger, the
// database (created if missing, then the library's migrations applied for the tables of
// Store, Outbox and the dead-letter archive, see package migrate), Redis (pinged) and the
// Kafka producer (with Config.KafkaSecurity: connected once, so that a broker refusing
// the credentials or the certificate fails New). Nothing is served or consumed until Run.
// If New fails, everything
// it opened is closed again.
func New(ctx context.Context, cfg Config, opts ...Option) (a *App, err error) {
	o := options{signals: true, sweeper: true, ensureDB: true, logOutput: os.Stderr, entityAttr: consumer.DefaultEntityAttribute}
	for _, opt := range opts {
		opt(&o)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a = &App{Config: cfg, opts: o, mux: http.NewServeMux(), ready: make(chan struct{})}
	self := a // "return nil, err" clears a before the deferred cleanup runs
	defer func() {
		if err != nil {
			_ = self.closeResources(context.Background())
			a = nil
		}
	}()

	a.Logger = o.logger
	if a.Logger == nil {
		a.Logger = NewLogger(o.logOutput, cfg.LogLevel, cfg.Service)
	}
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
		if err := EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
			return nil, err
		}
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: not a Postgres connection string", ErrInvalidConfig, EnvDatabaseURL)
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
	if a.Pool, err = tracing.NewPool(ctx, pcfg, inst...); err != nil {
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
		if a.Outbox, err = outbox.New(outbox.WithNotifier(a.Pool), outbox.WithSigner(cfg.Signing.Signer)); err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
	}
	if a.archive, err = consumer.NewDeadLetterArchive(a.Pool, ""); err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	a.Store = o.store
	if a.Store == nil {
		if a.Store, err = idempotency.NewStore(idempotency.WithRetention(cfg.idempotencyRetention())); err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
	}
	// The tables of the store, outbox and archive the App uses, whatever their names.
	err = migrate.Up(ctx, a.Pool, migrate.IdempotencyTable(a.Store.TableName()),
		migrate.OutboxTable(a.Outbox.TableName()), migrate.DeadLetterTable(a.archive.TableName()))
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	a.checks = append(a.checks, NamedCheck{"postgres", PostgresCheck(a.Pool)})

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
		a.checks = append(a.checks, NamedCheck{"redis", RedisCheck(a.Redis)})
	}

	secOpts, err := cfg.KafkaSecurity.Options()
	if err != nil {
		return nil, err
	}
	if cfg.KafkaSecurity.SASLMechanism == SASLPlain && !cfg.KafkaSecurity.TLS {
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
	a.checks = append(a.checks, NamedCheck{"kafka", KafkaCheck(a.Kafka)})

	a.relay, err = outbox.NewRelay(a.Pool, a.Kafka, a.Outbox, append([]outbox.RelayOption{
		outbox.WithTracerProvider(a.Telemetry.TracerProvider),
		outbox.WithMeterProvider(a.Telemetry.MeterProvider),
		outbox.WithLogger(a.Logger),
		outbox.WithEntityAttribute(o.entityAttr),
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

// Handle registers h for pattern (http.ServeMux syntax, e.g. "POST /orders") on the
// service's HTTP server, with a server span per request (otelhttp) whose parent is the
// caller's traceparent, under the request deadline of HTTPLimits.RequestTimeout.
// /healthz, /readyz and /metrics are taken.
//
// With [WithRouteAdmission], admission control comes first: a request shed by it is
// answered 503 before the deadline's timer and the server span exist, so a refusal
// costs only the answer and the shed counter (http.server.shed_requests); it has no span
// and is not in otelhttp's request metrics.
// The admitted ones are served exactly as without it.
func (a *App) Handle(pattern string, h http.Handler, opts ...RouteOption) {
	var o routeOptions
	for _, opt := range opts {
		opt(&o)
	}
	a.mux.Handle(pattern, route(a.Telemetry, pattern, h, a.opts.httpLimits.withDefaults().RequestTimeout, o.admission))
}

// route returns the handler of the route pattern: admission control by adm (none if
// nil), then the request deadline timeout, then otelhttp's server span, then h.
func route(tel *tracing.Telemetry, pattern string, h http.Handler, timeout time.Duration, adm *Admission) http.Handler {
	h = withRequestTimeout(serverSpan(tel, pattern, h), timeout)
	if adm != nil {
		h = adm.Wrap(h)
	}
	return h
}

// serverSpan returns h with otelhttp's server span and request metrics, the span
// named after the request's route pattern.
func serverSpan(tel *tracing.Telemetry, pattern string, h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, pattern,
		otelhttp.WithTracerProvider(tel.TracerProvider),
		otelhttp.WithMeterProvider(tel.MeterProvider),
		otelhttp.WithPropagators(tel.Propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if r.Pattern != "" {
				return r.Pattern
			}
			return r.Method
		}),
	)
}

// RouteOption configures one route of [App.Handle].
type RouteOption func(*routeOptions)

type routeOptions struct {
	admission *Admission
}

// WithRouteAdmission puts the route under adm (see [Admission]), outside its span and
// request deadline. One Admission may cover several routes: they share its cap.
func WithRouteAdmission(adm *Admission) RouteOption {
	return func(o *routeOptions) { o.admission = adm }
}

// HandleFunc is Handle for a handler function.
func (a *App) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request), opts ...RouteOption) {
	a.Handle(pattern, http.HandlerFunc(h), opts...)
}

// AddCheck adds a readiness check, reported under name by /readyz next to "postgres",
// "redis" and "kafka".
func (a *App) AddCheck(name string, c Check) {
	a.checks = append(a.checks, NamedCheck{name, c})
}

// ConsumerSpec describes one consumer group of a service; see [App.Consume].
type ConsumerSpec struct {
	// Group is the Kafka consumer group. Required.
	Group string
	// Topics are consumed by the group. Required. The group also consumes its retry
	// topic of each, "<topic>.retry.<group>" (consumer.WithRetryTopics), where `sagactl
	// dlq replay` sends the records this group dead-lettered. Run creates the dead-letter
	// and retry topics if missing (with Config.KafkaPartitions partitions; a creation
	// the broker refuses is logged), and the consumer then fails at start, with an error
	// matching consumer.ErrMissingTopic, if one still does not exist. A dead letter the topic
	// refuses (too large, or the topic deleted) is archived in the service's database
	// (consumer.DefaultDeadLetterTable, migrated by New) and settled.
	Topics []string
	// Router routes events by type (set Router or Handler).
	Router *consumer.Router
	// Handler handles every event (set Router or Handler).
	Handler consumer.TxHandler
	// Name is the handler name in the idempotency scope "<group>/<Name>" (default
	// "handler").
	Name string
	// Retry is the in-place retry policy (zero value: consumer.RetryConfig defaults).
	Retry consumer.RetryConfig
	// Configure, if set, adjusts the standard chain's configuration last.
	Configure func(*consumer.StandardConfig)
	// Options are extra runtime options (buffering, timeouts, client options).
	Options []consumer.Option
}

// Consume registers a consumer group running the standard middleware chain
// (consumer.Standard): the App's pool for transactions, its Kafka client for the
// dead-letter topics, its locker with fencing (when Redis is configured), its
// idempotency store, and Outbox.Wake after every commit. It starts with Run and is
// drained in Run's shutdown, before the relay stops.
//
// In-flight handlers get half of Config.ShutdownTimeout to finish once Run begins
// shutting down; then their context is cancelled. The group member uses
// Config.KafkaInstanceID (static membership),
// Config.KafkaSessionTimeout and Config.KafkaRebalanceTimeout; spec.Options may override
// them. /readyz reports its Health under "consumer <group>" ([ConsumerCheck]: outage or
// stalled partitions) and its assignment under "consumer <group> partitions": not ready
// when it has held no partition for longer than the session plus the rebalance timeout
// while the group has lag.
func (a *App) Consume(spec ConsumerSpec) error {
	if a.state.Load() != stateNew {
		return ErrRunning
	}
	sc := consumer.StandardConfig{
		DB:                a.Pool,
		Router:            spec.Router,
		Handler:           spec.Handler,
		DeadLetter:        a.Kafka,
		DeadLetterArchive: a.archive,
		Store:             a.Store,
		Name:              spec.Name,
		AfterCommit:       []func(){a.Outbox.Wake},
		Retry:             spec.Retry,
		EntityAttribute:   a.opts.entityAttr,
		TrustedKeys:       a.Config.Signing.TrustedKeys,
		Logger:            a.Logger,
		TracerProvider:    a.Telemetry.TracerProvider,
		MeterProvider:     a.Telemetry.MeterProvider,
		Propagator:        a.Telemetry.Propagator,
	}
	if a.Locker != nil {
		sc.Locker = a.Locker
		sc.Fence = true
	}
	if a.Redis != nil && sc.Retry.Probes.Redis == nil {
		// Confirms outages of unknown origin (consumer.Retry); Standard adds the pool's Ping.
		sc.Retry.Probes.Redis = func(ctx context.Context) error { return a.Redis.Ping(ctx).Err() }
	}
	if spec.Configure != nil {
		spec.Configure(&sc)
	}
	h, err := consumer.Standard(sc)
	if err != nil {
		return fmt.Errorf("app: consumer %s: %w", spec.Group, err)
	}
	copts := []consumer.Option{
		consumer.WithClientOptions(a.kafkaOpts...),
		consumer.WithLogger(a.Logger),
		consumer.WithMeterProvider(a.Telemetry.MeterProvider),
		consumer.WithDeadLetterTopicCheck(),
		consumer.WithRetryTopics(),
	}
	if d := a.Config.ShutdownTimeout / 2; d > 0 {
		// Half of the shutdown budget for in-flight handlers, so that the relay and
		// the connections still get their turn when a handler does not return.
		copts = append(copts, consumer.WithShutdownTimeout(d))
	}
	if a.Config.ConsumerBatch > 1 {
		bh, err := consumer.StandardBatch(sc)
		if err != nil {
			return fmt.Errorf("app: consumer %s: %w", spec.Group, err)
		}
		copts = append(copts, consumer.WithBatch(a.Config.ConsumerBatch, bh))
	}
	session, rebalance := a.Config.KafkaSessionTimeout, a.Config.KafkaRebalanceTimeout
	if session == 0 {
		session = DefaultKafkaSessionTimeout
	}
	if rebalance == 0 {
		rebalance = DefaultKafkaRebalanceTimeout
	}
	kopts := []kgo.Opt{kgo.SessionTimeout(session), kgo.RebalanceTimeout(rebalance)}
	if a.Config.KafkaInstanceID != "" {
		kopts = append(kopts, kgo.InstanceID(a.Config.KafkaInstanceID))
	}
	copts = append(copts, consumer.WithClientOptions(kopts...))
	copts = append(copts, spec.Options...)
	for _, t := range spec.Topics {
		a.dlqTopics = append(a.dlqTopics, consumer.DeadLetterTopic(t), consumer.RetryTopic(t, spec.Group))
	}
	c, err := consumer.New(a.Config.KafkaBrokers, spec.Group, spec.Topics, h, copts...)
	if err != nil {
		return fmt.Errorf("app: consumer %s: %w", spec.Group, err)
	}
	a.consumers = append(a.consumers, component{name: "consumer " + spec.Group, run: c.Run, mustRun: true})
	a.checks = append(a.checks, NamedCheck{"consumer " + spec.Group, ConsumerCheck(c)})
	// A healthy group hands a member partitions within a session timeout (a dead member
	// expires) plus a rebalance timeout (the others rejoin).
	a.checks = append(a.checks, NamedCheck{"consumer " + spec.Group + " partitions",
		assignmentCheck(spec.Group, c.Assigned, kadm.NewClient(a.Kafka), session+rebalance)})
	return nil
}

// Go registers a background function (a sweeper, a scheduler) started by Run. Its
// context is cancelled in the shutdown together with the consumers, before the relay
// stops, so events it enqueued are still published. Returning nil early is fine;
// returning an error before shutdown stops the service with that error.
func (a *App) Go(name string, fn func(ctx context.Context) error) {
	a.workers = append(a.workers, component{name: name, run: fn})
}

// EnsureTopics creates topics and their dead-letter topics (consumer.DeadLetterTopic) with
// Config.KafkaPartitions partitions if they do not exist (see [EnsureTopics]).
func (a *App) EnsureTopics(ctx context.Context, topics ...string) error {
	return EnsureTopics(ctx, a.Kafka, a.Config.KafkaPartitions, WithDeadLetterTopics(topics...)...)
}

// Migrate applies a service's own schema script under an advisory lock (see
// [MigrateSQL]); name identifies the script, e.g. "payment".
func (a *App) Migrate(ctx context.Context, name, script string) error {
	return MigrateSQL(ctx, a.Pool, name, script)
}

// Addr returns the HTTP server's listen address once Run is listening (useful with
// HTTP_ADDR=127.0.0.1:0), or "" before.
func (a *App) Addr() string {
	if p := a.addr.Load(); p != nil {
		return *p
	}
	return ""
}

// Ready is closed once Run has started every component and serves HTTP.
func (a *App) Ready() <-chan struct{} { return a.ready }

// Handler returns the App's HTTP handler with every endpoint: /healthz, /readyz (with
// each check's error), /metrics and the routes registered with Handle, each under the
// request deadline (HTTPLimits.RequestTimeout; a route's own, see Handle). Run serves
// it on one listener only without an admin listener (see Config.AdminAddr); tests may
// call it directly.
func (a *App) Handler() http.Handler {
	mux := a.adminMux(a.opts.httpLimits.withDefaults().RequestTimeout)
	mux.Handle("/", a.mux)
	return mux
}

// adminMux serves the admin endpoints, each under the request deadline timeout:
// /healthz, /readyz with details, /metrics.
func (a *App) adminMux(timeout time.Duration) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", withRequestTimeout(HealthHandler(), timeout))
	mux.Handle("GET /readyz", withRequestTimeout(ReadyHandler(ReadyTimeout, a.gate, a.checks...), timeout))
	mux.Handle("GET /metrics", withRequestTimeout(a.Telemetry.MetricsHandler(), timeout))
	return mux
}

// publicHandler serves the routes, /healthz and a /readyz that reports only the status,
// for a public listener next to an admin one.
func (a *App) publicHandler() http.Handler {
	timeout := a.opts.httpLimits.withDefaults().RequestTimeout
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", withRequestTimeout(HealthHandler(), timeout))
	mux.Handle("GET /readyz", withRequestTimeout(publicReady(ReadyHandler(ReadyTimeout, a.gate, a.checks...)), timeout))
	mux.Handle("/", a.mux)
	return mux
}

// AdminAddr returns the admin listener's address once Run is listening, or "" before
// and when the admin endpoints share the public listener.
func (a *App) AdminAddr() string {
	if p := a.adminAddr.Load(); p != nil {
		return *p
	}
	return ""
}

func (a *App) gate() error {
	switch a.state.Load() {
	case stateRunning:
		return nil
	case stateStopping:
		return fmt.Errorf("%w: shutting down", ErrNotReady)
	default:
		return fmt.Errorf("%w: starting", ErrNotReady)
	}
}

type exit struct {
	name string
	err  error
}

// group runs components under one cancellable context and reports early exits.
type group struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

func (a *App) start(parent context.Context, cs []component, exits chan<- exit, stopping *atomic.Bool) *group {
	ctx, cancel := context.WithCancel(parent)
	g := &group{cancel: cancel}
	for _, c := range cs {
		g.wg.Go(func() {
			err := c.run(ctx)
			if stopping.Load() {
				if err != nil && !errors.Is(err, context.Canceled) {
					g.mu.Lock()
					g.errs = append(g.errs, fmt.Errorf("app: %s: %w", c.name, err))
					g.mu.Unlock()
				}
				return
			}
			if err == nil && !c.mustRun {
				a.Logger.Info("app: background function finished", slog.String("component", c.name))
				return
			}
			if err == nil {
				err = errors.New("stopped before shutdown")
			}
			exits <- exit{c.name, err}
		})
	}
	return g
}

// stop cancels g and waits for it until ctx ends.
func (g *group) stop(ctx context.Context) error {
	g.cancel()
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		g.mu.Lock()
		defer g.mu.Unlock()
		return errors.Join(g.errs...)
	case <-ctx.Done():
		return fmt.Errorf("app: shutdown timed out: %w", ctx.Err())
	}
}

// Run serves HTTP, runs the relay, the consumers and the background functions until ctx
// is cancelled, SIGINT or SIGTERM arrives (unless WithoutSignals) or a component fails,
// and then shuts down in order, within Config.ShutdownTimeout:
//
//  1. /readyz turns 503 and the HTTP server stops accepting requests and waits for the
//     ones in flight;
//  2. consumers drain (in-flight handlers finish and their offsets are committed) and
//     background functions stop;
//  3. the outbox relay publishes what the last handlers enqueued (its batch in flight)
//     and steps down;
//  4. leases still being released reach Redis, and Kafka, Redis and Postgres connections
//     close;
//  5. telemetry is flushed (when the App set it up).
//
// Run returns nil after a shutdown caused by ctx or a signal, and an error wrapping
// [ErrComponent] when a component failed. An App runs once; Close is not needed after Run.
func (a *App) Run(ctx context.Context) (err error) {
	if a.state.Load() != stateNew || !a.ran.CompareAndSwap(false, true) {
		return ErrRunning
	}
	if a.opts.signals {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	log := a.Logger

	ln := a.opts.listener
	if ln == nil {
		ln, err = net.Listen("tcp", a.Config.HTTPAddr)
	}
	if err != nil {
		a.state.Store(stateStopping)
		a.closeResources(context.Background())
		return fmt.Errorf("app: listen on %s: %w", a.Config.HTTPAddr, err)
	}
	addr := ln.Addr().String()
	a.addr.Store(&addr)
	limits := a.opts.httpLimits.withDefaults()
	handler := a.Handler()
	adminLn := a.opts.adminListener
	if adminLn == nil && a.opts.listener == nil && a.Config.AdminAddr != "" {
		if adminLn, err = net.Listen("tcp", a.Config.AdminAddr); err != nil {
			ln.Close()
			a.state.Store(stateStopping)
			a.closeResources(context.Background())
			return fmt.Errorf("app: listen on %s (%s): %w", a.Config.AdminAddr, EnvAdminAddr, err)
		}
	}
	var admin *http.Server
	if adminLn != nil {
		handler = a.publicHandler()
		amux := a.adminMux(DefaultRequestTimeout)
		if a.Config.Pprof {
			handlePprof(amux, DefaultRequestTimeout)
		}
		admin = newServer(amux, HTTPLimits{}.withDefaults())
		admin.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
		aaddr := adminLn.Addr().String()
		a.adminAddr.Store(&aaddr)
	}

	var stopping atomic.Bool
	exits := make(chan exit, len(a.consumers)+len(a.workers)+3)
	base := context.WithoutCancel(ctx)
	if len(a.dlqTopics) > 0 {
		tctx, cancel := context.WithTimeout(ctx, ensureTopicsTimeout)
		err := EnsureTopics(tctx, a.Kafka, a.Config.KafkaPartitions, a.dlqTopics...)
		cancel()
		if err != nil {
			// Each consumer's own check (consumer.WithDeadLetterTopicCheck) fails on a topic
			// that is still missing.
			log.Warn("app: creating dead-letter and retry topics failed", slog.Any("topics", a.dlqTopics), slog.Any("error", err))
		}
	}
	relay := a.start(base, []component{{name: "outbox relay", run: a.relay.Run, mustRun: true}}, exits, &stopping)
	consumers := a.start(base, append(append([]component(nil), a.consumers...), a.workers...), exits, &stopping)

	srv := newServer(handler, limits)
	srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		if err := srv.Serve(limitConns(srv, ln, limits)); err != nil && !errors.Is(err, http.ErrServerClosed) && !stopping.Load() {
			exits <- exit{"http server", err}
		}
	}()
	adminDone := make(chan struct{})
	go func() {
		defer close(adminDone)
		if admin == nil {
			return
		}
		if err := admin.Serve(adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) && !stopping.Load() {
			exits <- exit{"admin http server", err}
		}
	}()

	a.state.Store(stateRunning)
	close(a.ready)
	traces := a.Telemetry.TracesExporter
	if traces == "" {
		traces = "none"
	}
	log.Info("app: started", slog.String("http_addr", addr), slog.String("admin_addr", a.AdminAddr()),
		slog.Int("consumers", len(a.consumers)), slog.Int("background", len(a.workers)),
		// Without an exporter spans carry ids only (tracing.Setup): say so where operators look.
		slog.String("traces_exporter", traces), slog.Bool("spans_recorded", a.Telemetry.RecordsSpans))

	var cause error
	select {
	case <-ctx.Done():
		log.Info("app: shutting down", slog.String("cause", context.Cause(ctx).Error()))
	case e := <-exits:
		cause = fmt.Errorf("%w: %s: %w", ErrComponent, e.name, e.err)
		log.Error("app: component failed, shutting down", slog.String("component", e.name), slog.Any("error", e.err))
	}
	stopping.Store(true)
	a.state.Store(stateStopping)

	sctx, cancel := context.WithTimeout(context.Background(), a.Config.ShutdownTimeout)
	defer cancel()
	errs := []error{cause}
	step := func(name string, f func() error) {
		start := time.Now()
		if err := f(); err != nil {
			errs = append(errs, err)
			log.Warn("app: shutdown step failed", slog.String("step", name), slog.Any("error", err))
			return
		}
		log.Info("app: shutdown step done", slog.String("step", name), slog.Duration("took", time.Since(start)))
	}
	step("http", func() error {
		if err := srv.Shutdown(sctx); err != nil {
			return fmt.Errorf("app: http shutdown: %w", err)
		}
		<-httpDone
		if admin != nil {
			if err := admin.Shutdown(sctx); err != nil {
				return fmt.Errorf("app: admin http shutdown: %w", err)
			}
		}
		<-adminDone
		return nil
	})
	step("consumers", func() error { return consumers.stop(sctx) })
	step("relay", func() error { return relay.stop(sctx) })
	step("close", func() error { return a.closeResources(sctx) })
	return errors.Join(errs...)
}

// Close releases the App's connections and flushes its telemetry without running it:
// for an App built by New whose Run is never called. It is safe to call more than once
// and after Run.
func (a *App) Close() error {
	a.state.Store(stateStopping)
	ctx, cancel := context.WithTimeout(context.Background(), a.Config.ShutdownTimeout)
	defer cancel()
	return a.closeResources(ctx)
}

func (a *App) closeResources(ctx context.Context) error {
	var err error
	a.closeOnce.Do(func() {
		var errs []error
		if a.Kafka != nil {
			a.Kafka.Close()
		}
		if a.Locker != nil {
			// Leases released in the background after the last handlers (Lock).
			if e := a.Locker.Wait(ctx); e != nil {
				errs = append(errs, fmt.Errorf("app: lock releases: %w", e))
			}
		}
		if a.Redis != nil {
			if e := a.Redis.Close(); e != nil {
				errs = append(errs, fmt.Errorf("app: close redis: %w", e))
			}
		}
		if a.Pool != nil {
			a.Pool.Close()
		}
		if a.ownTel && a.Telemetry != nil {
			if e := a.Telemetry.Shutdown(ctx); e != nil {
				errs = append(errs, fmt.Errorf("app: flush telemetry: %w", e))
			}
		}
		err = errors.Join(errs...)
	})
	return err
}

// Serve is New, then setup, then Run: the whole life of a service in one call. setup
// registers the service's parts (schemas, topics, routes, consumers, background work) on
// the App; if it fails, the App is closed and setup's error returned. Otherwise Serve
// blocks until ctx is cancelled (or a signal arrives) and returns Run's result.
func Serve(ctx context.Context, cfg Config, setup func(context.Context, *App) error, opts ...Option) error {
	a, err := New(ctx, cfg, opts...)
	if err != nil {
		return err
	}
	if err := setup(ctx, a); err != nil {
		_ = a.Close()
		return err
	}
	return a.Run(ctx)
}
