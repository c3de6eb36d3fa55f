package app

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/tracing"
)

type options struct {
	// where the Config comes from (see New)
	config *Config
	env    *Env
	// the kit's consumer group (handle.go)
	group       string
	handlerName string
	topics      []string
	schemas     []schema
	deadUnknown bool
	retry       *consumer.RetryConfig
	chain       []func(*consumer.StandardConfig)
	upcasters   []consumer.UpcasterOption // upcast.go
	consumerOps []consumer.Option

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

// Option configures New. New validates every option's value and returns the error.
type Option func(*options)

type schema struct{ name, script string }

// WithConfig makes New use cfg instead of reading the environment (tests, configuration
// built in code). New validates it (Config.Validate) and returns every problem at once.
// cfg.Service, when empty, is New's service name.
func WithConfig(cfg Config) Option { return func(o *options) { o.config = &cfg } }

// WithEnv makes New read the configuration from env instead of the process environment
// (see [MapEnv]); New returns env's problems (Env.Err), so read a service's own settings
// from the same Env first and they are reported together. Default: [NewEnv](nil).
func WithEnv(env *Env) Option { return func(o *options) { o.env = env } }

// WithGroup sets the consumer group of the handlers registered with [App.Handle].
// Default: the service name.
func WithGroup(group string) Option { return func(o *options) { o.group = group } }

// WithHandlerName sets the name in the idempotency scope "<group>/<name>" under which the
// handlers registered with [App.Handle] claim each event id. One consumer group has one
// scope: each event type has one handler, so the event id alone names the work. Change
// it only with care: events already claimed under the old scope would be handled again.
// Default "handler".
func WithHandlerName(name string) Option { return func(o *options) { o.handlerName = name } }

// WithTopics declares the topics the service publishes to ([App.Publish]); Run creates
// the missing ones with Config.KafkaPartitions partitions. Topics consumed by
// [App.Handle] and their dead-letter topics are created without being declared.
func WithTopics(topics ...string) Option {
	return func(o *options) { o.topics = append(o.topics, topics...) }
}

// WithSchema applies the service's own SQL script at start, in New, after the library's
// tables: under a transaction-scoped advisory lock, so instances starting together take
// turns (see [MigrateSQL]). Write it idempotent (CREATE TABLE IF NOT EXISTS, ...): it runs
// at every start. name identifies the script in errors, e.g. "shipping". Several
// WithSchema run in order.
func WithSchema(name, script string) Option {
	return func(o *options) { o.schemas = append(o.schemas, schema{name, script}) }
}

// WithDeadLetterUnknownTypes dead-letters (reason "unknown_type") events of types that no
// [App.Handle] registered for the topic they arrived on. Default: they are settled as
// ignored, counted (choreo_consumer_outcomes_total{choreo_outcome="ignored"}) and logged
// at debug, as a service reading a topic shared with other event types needs.
func WithDeadLetterUnknownTypes() Option { return func(o *options) { o.deadUnknown = true } }

// WithRetry sets the in-place retry policy of the handlers registered with [App.Handle].
// Default: the consumer.RetryConfig defaults.
func WithRetry(r consumer.RetryConfig) Option { return func(o *options) { o.retry = &r } }

// WithChain adjusts the standard chain's configuration of [App.Handle]'s consumer group
// last (decode options, dead-letter value bound, ...). Default: none.
func WithChain(f func(*consumer.StandardConfig)) Option {
	return func(o *options) { o.chain = append(o.chain, f) }
}

// WithConsumerOptions adds runtime options of [App.Handle]'s consumer group (buffering,
// timeouts, client options), after the kit's. Default: none.
func WithConsumerOptions(opts ...consumer.Option) Option {
	return func(o *options) { o.consumerOps = append(o.consumerOps, opts...) }
}

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
// each consumer's client (before a consumer's own options). They come after the options of
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

// resolve returns the Config of the service named service and checks the options' values:
// every problem at once, each matching ErrInvalidConfig.
func (o *options) resolve(service string) (Config, error) {
	var cfg Config
	var errs []error
	if o.config != nil {
		cfg = *o.config
		if cfg.Service == "" {
			cfg.Service = service
		}
		errs = append(errs, cfg.Validate())
	} else {
		env := o.env
		if env == nil {
			env = NewEnv(nil)
		}
		cfg = LoadConfig(env, service, DefaultHTTPAddr)
		errs = append(errs, env.Err())
	}
	if o.group == "" {
		o.group = cfg.Service
	}
	bad := func(what string) { errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidConfig, what)) }
	for _, t := range o.topics {
		if strings.TrimSpace(t) == "" {
			bad("WithTopics: empty topic name")
		}
	}
	for _, s := range o.schemas {
		if s.name == "" || strings.TrimSpace(s.script) == "" {
			bad(fmt.Sprintf("WithSchema(%q): empty name or script", s.name))
		}
	}
	if o.group == "" {
		bad("WithGroup: empty consumer group")
	}
	errs = append(errs, o.checkUpcasters())
	for _, f := range o.chain {
		if f == nil {
			bad("WithChain: nil function")
		}
	}
	return cfg, errors.Join(errs...)
}
