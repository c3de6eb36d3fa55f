package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/internal/poolidle"
	"github.com/choreo-saga/choreo/internal/retention"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/tracing"
)

// MetricPoolIdleClosed counts the Postgres pool's connections closed after
// defaultDatabaseIdleTime unused (see Config.DatabaseMaxConns).
const MetricPoolIdleClosed = "choreo.db.pool.idle_closed"

// The steps of New, in order. Each opens what it names and records it on the App, whose
// closeResources releases it if a later step fails.

// connectPostgres creates the service's database if it is missing (unless
// WithoutCreateDatabase), opens the instrumented pool, warms it and pings it.
func (a *App) connectPostgres(ctx context.Context, inst []tracing.InstrumentOption) error {
	cfg, o := a.Config, a.opts
	if o.ensureDB {
		if err := ensureDatabase(ctx, cfg.sessionURL()); err != nil {
			return err
		}
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("%w: %s: not a Postgres connection string", ErrInvalidConfig, envDatabaseURL)
	}
	if cfg.DatabaseMaxConns > 0 && !strings.Contains(cfg.DatabaseURL, "pool_max_conns") {
		pcfg.MaxConns = cfg.DatabaseMaxConns
	}
	var warm int32 // DATABASE_MIN_CONNS: opened at start, closed once idle like any other
	if cfg.DatabaseMinConns > 0 && !strings.Contains(cfg.DatabaseURL, "pool_min_conns") {
		warm = min(cfg.DatabaseMinConns, pcfg.MaxConns)
	}
	parsedIdle, parsedCheck := pcfg.MaxConnIdleTime, pcfg.HealthCheckPeriod
	if o.poolConfig != nil {
		o.poolConfig(pcfg)
	}
	// Idle connections: closed by a poolidle.Closer (set up after WithPoolConfig, so it
	// chains a BeforeClose set there) unless the URL or WithPoolConfig sets pgxpool's own
	// idle time or health check period; pgxpool's health check then closes them, with the
	// kit's default for whichever of the two is not set.
	userIdle := strings.Contains(cfg.DatabaseURL, "pool_max_conn_idle_time") || pcfg.MaxConnIdleTime != parsedIdle
	userCheck := strings.Contains(cfg.DatabaseURL, "pool_health_check_period") || pcfg.HealthCheckPeriod != parsedCheck
	var idle *poolidle.Closer
	switch {
	case !userIdle && !userCheck:
		idle = poolidle.New(pcfg, defaultDatabaseIdleTime)
	case !userIdle:
		pcfg.MaxConnIdleTime = defaultDatabaseIdleTime
	case !userCheck:
		pcfg.HealthCheckPeriod = defaultDatabaseIdleCheck
	}
	tracing.InstrumentPostgres(pcfg, inst...)
	if a.Pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return fmt.Errorf("app: postgres: %w", err)
	}
	if err := tracing.RecordPoolStats(a.Pool, inst...); err != nil {
		a.Pool.Close()
		return fmt.Errorf("app: postgres: %w", err)
	}
	// The warm-up first: pgxpool opens MinConns (pool_min_conns) in the background from
	// here, and a ping racing them could be refused by a server or role at its connection
	// limit although the warm-up got connections; after it, the ping uses one of them.
	a.warmPool(ctx, warm)
	if err := a.Pool.Ping(ctx); err != nil {
		return fmt.Errorf("app: postgres database %q: %w", cfg.DatabaseName(), err)
	}
	a.checks = append(a.checks, namedCheck{"postgres", postgresCheck(a.Pool)})
	if idle != nil {
		// pgxpool's own pgxpool_max_idle_destroys_total stays 0: the Closer counts its closes.
		if _, err := a.Telemetry.MeterProvider.Meter("github.com/choreo-saga/choreo/app").Int64ObservableCounter(MetricPoolIdleClosed,
			metric.WithUnit("{connection}"), metric.WithDescription("Postgres pool connections closed after a minute unused"),
			metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
				o.Observe(idle.Closed())
				return nil
			})); err != nil {
			return fmt.Errorf("app: postgres: %w", err)
		}
		a.workers = append(a.workers, component{name: "postgres idle closer", mustRun: true, run: func(ctx context.Context) error {
			idle.Run(ctx, a.Pool, defaultDatabaseIdleCheck)
			return nil
		}})
	}
	return nil
}

// prepareTables makes the outbox, the idempotency store and the dead-letter archive (or
// takes those given as options) and applies their tables, then the service's own
// schemas (WithSchema).
func (a *App) prepareTables(ctx context.Context, _ []tracing.InstrumentOption) (err error) {
	cfg, o := a.Config, a.opts
	a.Outbox = o.outbox
	if a.Outbox == nil {
		obOpts := []outbox.Option{outbox.WithNotifier(a.Pool)}
		if cfg.Signing.Signer != nil {
			obOpts = append(obOpts, outbox.WithSigner(cfg.Signing.Signer))
		}
		if a.Outbox, err = outbox.New(obOpts...); err != nil {
			return fmt.Errorf("app: %w", err)
		}
	}
	if a.archive, err = consumer.NewDeadLetterArchive(a.Pool, "", consumer.ArchiveValueBytes(cfg.deadLetterArchiveBytes())); err != nil {
		return fmt.Errorf("app: %w", err)
	}
	a.Store = o.store
	if a.Store == nil {
		if a.Store, err = idempotency.NewStore(idempotency.WithRetention(cfg.idempotencyRetention())); err != nil {
			return fmt.Errorf("app: %w", err)
		}
	}
	// The tables of the store, outbox and archive the App uses, whatever their names.
	err = migrate.Up(ctx, a.Pool, migrate.WithIdempotencyTable(a.Store.TableName()),
		migrate.WithOutboxTable(a.Outbox.TableName()), migrate.WithDeadLetterTable(a.archive.TableName()))
	if err != nil {
		return fmt.Errorf("app: %w", err)
	}
	for _, sc := range o.schemas {
		if err := MigrateSQL(ctx, a.Pool, sc.name, sc.script); err != nil {
			return err
		}
	}
	return nil
}

// connectRedis opens the instrumented Redis client and the locker on it, when Redis is
// configured, and pings it.
func (a *App) connectRedis(ctx context.Context, inst []tracing.InstrumentOption) (err error) {
	cfg, o := a.Config, a.opts
	ro, err := cfg.redisOptions()
	if err != nil || ro == nil {
		return err
	}
	if o.redisOptions != nil {
		o.redisOptions(ro)
	}
	a.Redis = redis.NewClient(ro)
	if err := tracing.InstrumentRedis(a.Redis, inst...); err != nil {
		return fmt.Errorf("app: redis: %w", err)
	}
	if err := a.Redis.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("app: redis %s: %w%s", cfg.redisTarget(), err, redisAuthHint(err))
	}
	lo := append([]lock.Option{lock.WithNamespace(lock.DefaultNamespace + cfg.Service + ":")}, o.lockOpts...)
	if a.Locker, err = lock.New(a.Redis, lo...); err != nil {
		return fmt.Errorf("app: %w", err)
	}
	a.checks = append(a.checks, namedCheck{"redis", redisCheck(a.Redis)})
	return nil
}

// connectKafka opens the Kafka producer the relay and dead-lettering share and, with
// Kafka security configured, checks the credentials now rather than in retries.
func (a *App) connectKafka(ctx context.Context, _ []tracing.InstrumentOption) (err error) {
	cfg, o := a.Config, a.opts
	secOpts, err := cfg.KafkaSecurity.Options()
	if err != nil {
		return err
	}
	if cfg.KafkaSecurity.SASLMechanism == saslPlain && !cfg.KafkaSecurity.TLS {
		a.Logger.Warn("app: SASL PLAIN without TLS sends the Kafka password in clear text; set KAFKA_TLS=on")
	}
	a.kafkaOpts = append(secOpts, o.kafkaOpts...)
	compression, err := KafkaCompressionOption(cfg.KafkaCompression)
	if err != nil {
		return err
	}
	kopts := append([]kgo.Opt{kgo.SeedBrokers(cfg.KafkaBrokers...), kgo.ClientID(cfg.Service), compression}, a.kafkaOpts...)
	if a.Kafka, err = kgo.NewClient(kopts...); err != nil {
		return fmt.Errorf("app: kafka client: %w", err)
	}
	if cfg.KafkaSecurity.Enabled() {
		// A wrong password or certificate is a configuration error: report it now, not
		// as consumers and a relay that retry forever.
		pctx, cancel := context.WithTimeout(ctx, kafkaAuthTimeout)
		err := a.Kafka.Ping(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("app: kafka %s: cannot connect with %s%s: %w",
				strings.Join(cfg.KafkaBrokers, ","), cfg.KafkaSecurity, kafkaAuthHint(cfg.KafkaSecurity, err), err)
		}
	}
	a.checks = append(a.checks, namedCheck{"kafka", kafkaCheck(a.Kafka)})
	return nil
}

// prepareWorkers makes the outbox relay and, unless WithoutSweeper, the idempotency
// sweeper and the dead-letter archive's pruner that Run starts.
func (a *App) prepareWorkers(_ context.Context, _ []tracing.InstrumentOption) (err error) {
	o := a.opts
	relayOpts := []outbox.RelayOption{
		outbox.WithTracerProvider(a.Telemetry.TracerProvider),
		outbox.WithMeterProvider(a.Telemetry.MeterProvider),
		outbox.WithLogger(a.Logger),
	}
	if u := a.Config.DatabaseSessionURL; u != "" {
		// The relay's leader lock and LISTEN need a real session (DATABASE_SESSION_URL).
		cc, err := pgx.ParseConfig(u)
		if err != nil {
			return fmt.Errorf("%w: %s: not a Postgres connection string", ErrInvalidConfig, envDatabaseSession)
		}
		cc.Tracer = a.Pool.Config().ConnConfig.Tracer
		relayOpts = append(relayOpts, outbox.WithSessionConfig(cc))
	}
	a.relay, err = outbox.NewRelay(a.Pool, a.Kafka, a.Outbox, append(relayOpts, o.relayOpts...)...)
	if err != nil {
		return fmt.Errorf("app: %w", err)
	}
	if o.sweeper {
		sw, err := idempotency.NewSweeper(a.Pool, idempotency.WithTable(a.Store.TableName()),
			idempotency.WithSweepInterval(retention.Interval(a.Config.idempotencyRetention(), idempotency.DefaultSweepInterval)))
		if err != nil {
			return fmt.Errorf("app: %w", err)
		}
		a.workers = append(a.workers, component{name: "idempotency sweeper", run: sw.Run, mustRun: true},
			component{name: "dead-letter archive pruner", run: a.deadLetterPruner, mustRun: true})
	}
	return nil
}
