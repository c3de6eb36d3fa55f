package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/tracing"
)

// deps are the service's long-lived clients.
type deps struct {
	tel   *tracing.Telemetry
	pool  *pgxpool.Pool
	rdb   *redis.Client
	kafka *kgo.Client // produces for the outbox relay and the dead-letter topic
}

// open sets up telemetry first, so that every client below reports to it, then the
// clients. On error it closes what it opened.
func open(ctx context.Context, cfg Config) (d *deps, err error) {
	d = &deps{}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.close(context.WithoutCancel(ctx)))
		}
	}()

	// Spans, metrics (served at /metrics) and W3C propagation, configured by the
	// standard OTEL_* variables. With no OTEL_EXPORTER_OTLP_ENDPOINT nothing is
	// exported, but spans are still recorded, so trace ids reach logs and records.
	if d.tel, err = tracing.Setup(ctx, "shipping"); err != nil {
		return d, err
	}
	inst := []tracing.InstrumentOption{
		tracing.WithTracerProvider(d.tel.TracerProvider),
		tracing.WithMeterProvider(d.tel.MeterProvider),
	}

	// Postgres, sized for the partitions: every partition worker holds a connection
	// while its transaction runs, and pgxpool's default is only max(4, NumCPU).
	pgcfg, err := pgxpool.ParseConfig(cfg.PostgresDSN)
	if err != nil {
		return d, fmt.Errorf("POSTGRES_DSN: %w", err)
	}
	pgcfg.MaxConns = cfg.MaxConns
	if d.pool, err = tracing.NewPool(ctx, pgcfg, inst...); err != nil {
		return d, err
	}
	if err := d.pool.Ping(ctx); err != nil {
		return d, fmt.Errorf("postgres: %w", err)
	}

	d.rdb = redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
	if err := tracing.InstrumentRedis(d.rdb, inst...); err != nil {
		return d, err
	}
	if err := d.rdb.Ping(ctx).Err(); err != nil {
		return d, fmt.Errorf("redis: %w", err)
	}

	// franz-go's defaults are what the relay requires (idempotent, acks=all) and what
	// dead letters need (acknowledged by every in-sync replica before the offset moves).
	if d.kafka, err = kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), tracing.KafkaClientMetrics(inst...)); err != nil {
		return d, fmt.Errorf("kafka: %w", err)
	}
	if err := d.kafka.Ping(ctx); err != nil {
		return d, fmt.Errorf("kafka: %w", err)
	}
	return d, nil
}

// close flushes telemetry first (its last collection still reads the pool's and the
// clients' statistics), then closes the clients. The consumer, the relay and the lock
// releases must be done with them.
func (d *deps) close(ctx context.Context) error {
	var err error
	if d.tel != nil {
		err = d.tel.Shutdown(ctx)
	}
	if d.kafka != nil {
		d.kafka.Close()
	}
	if d.rdb != nil {
		err = errors.Join(err, d.rdb.Close())
	}
	if d.pool != nil {
		d.pool.Close()
	}
	return err
}

// migrateAll creates or upgrades the library's tables and creates the service's own. Both
// steps are serialised by an advisory lock: run it on every start, from every instance.
func migrateAll(ctx context.Context, pool *pgxpool.Pool) error {
	// choreo_idempotency, choreo_lock_fences, choreo_outbox(_dead), choreo_dead_letters;
	// pass migrate.IdempotencyTable, migrate.OutboxTable, migrate.DeadLetterTable for
	// custom names.
	if err := migrate.Up(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, shipmentsSchema); err != nil {
		return fmt.Errorf("migrate shipments: %w", err)
	}
	return nil
}

// createTopics creates the consumed topic's dead-letter topic (without it the consumer
// refuses to start), the topic this service produces to and, if it is missing, the
// consumed topic. Topics that exist are left as they are. franz-go never auto-creates
// topics unless the client opts in, whatever the brokers allow.
func createTopics(ctx context.Context, cl *kgo.Client, cfg Config) error {
	// kadm wraps cl without owning it: do not Close the admin client, it would close cl.
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopics(ctx, cfg.Partitions, -1, nil, // -1: the brokers' replication factor
		cfg.OrdersTopic, consumer.DeadLetterTopic(cfg.OrdersTopic), cfg.ShippingTopic)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	var errs []error
	for _, t := range resp.Sorted() {
		if t.Err != nil && !errors.Is(t.Err, kerr.TopicAlreadyExists) {
			errs = append(errs, fmt.Errorf("create topic %s: %w", t.Topic, t.Err))
		}
	}
	return errors.Join(errs...)
}

// routes serves /metrics (Prometheus exposition of every choreo, pgx, Redis and Kafka
// client metric) and /healthz (503 naming the partitions while one is in an outage or
// stalled).
func routes(tel *tracing.Telemetry, c *consumer.Consumer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", tel.MetricsHandler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := c.Health(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
