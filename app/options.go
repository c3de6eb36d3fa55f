package app

import (
	"errors"
	"fmt"
	"io"
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
	consumerOps []consumer.Option

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

// Option configures New. An option validates its value: New returns every option's
// error and every problem of the configuration at once, each matching
// [ErrInvalidConfig].
type Option func(*options) error

// invalid returns an error wrapping ErrInvalidConfig.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}

type schema struct{ name, script string }

// WithConfig makes New use cfg instead of reading the environment (tests, configuration
// built in code). New validates it (Config.Validate) and returns every problem at once.
// cfg.Service, when empty, is New's service name.
func WithConfig(cfg Config) Option { return func(o *options) error { o.config = &cfg; return nil } }

// WithEnv makes New read the configuration from env instead of the process environment
// (see [MapEnv]); New returns env's problems (Env.Err), so read a service's own settings
// from the same Env first and they are reported together. Default: [NewEnv](nil).
func WithEnv(env *Env) Option {
	return func(o *options) error {
		if env == nil {
			return invalid("WithEnv: nil env")
		}
		o.env = env
		return nil
	}
}

// WithGroup sets the consumer group of the handlers registered with [On].
// Default: the service name.
func WithGroup(group string) Option {
	return func(o *options) error {
		if group == "" {
			return invalid("WithGroup: empty consumer group")
		}
		o.group = group
		return nil
	}
}

// WithHandlerName sets the name in the idempotency scope "<group>/<name>" under which the
// handlers registered with [On] claim each event id. One consumer group has one
// scope: each event type has one handler, so the event id alone names the work. Change
// it only with care: events already claimed under the old scope would be handled again.
// Default "handler".
func WithHandlerName(name string) Option {
	return func(o *options) error {
		if name == "" {
			return invalid("WithHandlerName: empty name")
		}
		o.handlerName = name
		return nil
	}
}

// WithTopics declares the topics the service publishes to ([App.Publish]); Run creates
// the missing ones with Config.KafkaPartitions partitions. Topics consumed by
// [On] and their dead-letter topics are created without being declared.
func WithTopics(topics ...string) Option {
	return func(o *options) error {
		for _, t := range topics {
			if strings.TrimSpace(t) == "" {
				return invalid("WithTopics: empty topic name")
			}
		}
		o.topics = append(o.topics, topics...)
		return nil
	}
}

// WithSchema applies the service's own SQL script at start, in New, after the library's
// tables: under a transaction-scoped advisory lock, so instances starting together take
// turns (see [MigrateSQL]). Write it idempotent (CREATE TABLE IF NOT EXISTS, ...): it runs
// at every start. name identifies the script in errors, e.g. "shipping". Several
// WithSchema run in order.
func WithSchema(name, script string) Option {
	return func(o *options) error {
		if name == "" || strings.TrimSpace(script) == "" {
			return invalid("WithSchema(%q): empty name or script", name)
		}
		o.schemas = append(o.schemas, schema{name, script})
		return nil
	}
}

// WithDeadLetterUnknownTypes dead-letters (reason "unknown_type") events of types that no
// [On] registered for the topic they arrived on. Default: they are settled as
// ignored, counted (choreo_consumer_outcomes_total{choreo_outcome="ignored"}) and logged
// at debug, as a service reading a topic shared with other event types needs.
func WithDeadLetterUnknownTypes() Option {
	return func(o *options) error { o.deadUnknown = true; return nil }
}

// WithRetry sets the in-place retry policy of the handlers registered with [On].
// Default: the consumer.RetryConfig defaults.
func WithRetry(r consumer.RetryConfig) Option {
	return func(o *options) error { o.retry = &r; return nil }
}

// WithChain adjusts the standard chain's configuration of [On]'s consumer group
// last (decode options, dead-letter value bound, ...). Default: none.
func WithChain(f func(*consumer.StandardConfig)) Option {
	return func(o *options) error {
		if f == nil {
			return invalid("WithChain: nil function")
		}
		o.chain = append(o.chain, f)
		return nil
	}
}

// WithConsumerOptions adds runtime options of [On]'s consumer group (buffering,
// timeouts, client options), after the kit's. Default: none.
func WithConsumerOptions(opts ...consumer.Option) Option {
	return func(o *options) error { o.consumerOps = append(o.consumerOps, opts...); return nil }
}

// WithLogOutput sets where the App's logger writes: JSON lines at Config.LogLevel
// (LOG_LEVEL), each with the service name and the trace, span and correlation ids of its
// context. Default os.Stderr.
func WithLogOutput(w io.Writer) Option {
	return func(o *options) error {
		if w == nil {
			return invalid("WithLogOutput: nil writer")
		}
		o.logOutput = w
		return nil
	}
}

// WithTelemetry uses tel instead of calling tracing.Setup; the caller keeps ownership
// and shuts it down. Default: tracing.Setup(ctx, Config.Service, tracing options), shut
// down (flushed) as the last step of Run.
func WithTelemetry(tel *tracing.Telemetry) Option {
	return func(o *options) error {
		if tel == nil {
			return invalid("WithTelemetry: nil telemetry")
		}
		o.telemetry = tel
		return nil
	}
}

// WithTracingOptions adds options for the default tracing.Setup, e.g.
// tracing.WithoutGlobals() or tracing.WithSpanProcessor(recorder) in tests.
func WithTracingOptions(opts ...tracing.Option) Option {
	return func(o *options) error { o.tracingOpts = append(o.tracingOpts, opts...); return nil }
}

// WithoutSignals stops Run from shutting down on SIGINT and SIGTERM; only its context
// does. Default: both signals start the graceful shutdown.
func WithoutSignals() Option { return func(o *options) error { o.signals = false; return nil } }

// WithKafkaOptions adds franz-go options (TLS, SASL, client id, ...) to every Kafka
// client of the App: the producer shared by the outbox relay and dead-lettering, and
// each consumer's client (before a consumer's own options). They come after the options of
// Config.KafkaSecurity. The producer must stay an idempotent producer with acks=all (the
// defaults), or the relay refuses it. Default: none.
func WithKafkaOptions(opts ...kgo.Opt) Option {
	return func(o *options) error { o.kafkaOpts = append(o.kafkaOpts, opts...); return nil }
}

// WithOutbox sets the outbox (for a custom table, which New migrates). Default: outbox.New with a
// Notifier on the pool, so a Wake reaches a relay leading in another instance too.
func WithOutbox(ob *outbox.Outbox) Option {
	return func(o *options) error {
		if ob == nil {
			return invalid("WithOutbox: nil outbox")
		}
		o.outbox = ob
		return nil
	}
}

// WithLockOptions adds options of the Redis locker. Default: the lock package's
// defaults with the namespace "choreo:lock:<service>:".
func WithLockOptions(opts ...lock.Option) Option {
	return func(o *options) error { o.lockOpts = append(o.lockOpts, opts...); return nil }
}

// WithRelayOptions adds outbox relay options (batch size, poll interval, ...).
func WithRelayOptions(opts ...outbox.RelayOption) Option {
	return func(o *options) error { o.relayOpts = append(o.relayOpts, opts...); return nil }
}

// WithEntityAttribute names the entity id in the spans and logs of the App's consumers,
// e.g. "order.id": there the record key is the entity the handlers work on. The relay's
// produce spans do not get it (an App may publish events keyed by other entities);
// give outbox.WithEntityAttribute to [WithRelayOptions] when every published topic is
// keyed by the same entity. Default consumer.DefaultEntityAttribute ("entity.id").
func WithEntityAttribute(name string) Option {
	return func(o *options) error {
		if name == "" {
			return invalid("WithEntityAttribute: empty name")
		}
		o.entityAttr = name
		return nil
	}
}

// WithoutSweeper disables the background idempotency sweeper and the dead-letter archive
// pruner (for services whose records are swept elsewhere). Default: one of each per App
// (Config.IdempotencyRetention, Config.DeadLetterRetention).
func WithoutSweeper() Option { return func(o *options) error { o.sweeper = false; return nil } }

// WithoutCreateDatabase stops New from creating a missing database (for users without
// the CREATEDB privilege). Default: the database is created if missing.
func WithoutCreateDatabase() Option { return func(o *options) error { o.ensureDB = false; return nil } }

// WithIdempotencyStore sets the idempotency store of consumers; New migrates its table
// and the sweeper sweeps it. Default idempotency.NewStore().
func WithIdempotencyStore(s *idempotency.Store) Option {
	return func(o *options) error {
		if s == nil {
			return invalid("WithIdempotencyStore: nil store")
		}
		o.store = s
		return nil
	}
}

// WithPoolConfig adjusts the Postgres pool configuration (size, timeouts) before the
// pool opens. Setting MaxConnIdleTime or HealthCheckPeriod hands the closing of idle
// connections to pgxpool's own health check (see Config.DatabaseMaxConns).
func WithPoolConfig(f func(*pgxpool.Config)) Option {
	return func(o *options) error {
		if f == nil {
			return invalid("WithPoolConfig: nil function")
		}
		o.poolConfig = f
		return nil
	}
}

// WithRedisOptions adjusts the Redis client options before the client is created.
func WithRedisOptions(f func(*redis.Options)) Option {
	return func(o *options) error {
		if f == nil {
			return invalid("WithRedisOptions: nil function")
		}
		o.redisOptions = f
		return nil
	}
}

// WithListener makes Run serve HTTP on ln instead of listening on Config.HTTPAddr
// (tests, socket activation). Run closes it.
func WithListener(ln net.Listener) Option {
	return func(o *options) error {
		if ln == nil {
			return invalid("WithListener: nil listener")
		}
		o.listener = ln
		return nil
	}
}

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
		cfg = LoadConfig(env, service, defaultHTTPAddr)
		errs = append(errs, env.Err())
	}
	if o.group == "" {
		o.group = cfg.Service
	}
	return cfg, errors.Join(errs...)
}
