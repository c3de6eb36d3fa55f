// Command shipping is a small service that embeds the choreo library in its own Kafka
// service: it consumes order.confirmed from orders.events, schedules a shipment (its own
// shipments table) and emits shipment.scheduled to shipping.events through the
// transactional outbox. docs/embedding.md walks through it step by step.
//
// Configuration is read from the environment (see Config): KAFKA_BROKERS, POSTGRES_DSN
// and REDIS_ADDR are required; OTEL_* configure tracing and metrics export.
package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/tracing"
)

// shutdownTimeout bounds the shutdown steps after the consumer has stopped.
const shutdownTimeout = 15 * time.Second

func main() {
	// JSON logs; records logged with a context carry trace_id, span_id and correlation_id.
	slog.SetDefault(slog.New(tracing.NewLogHandler(slog.NewJSONHandler(os.Stderr, nil))))
	cfg, err := loadConfig(os.Getenv)
	if err != nil {
		slog.Error(err.Error())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		slog.Error("shipping: stopped", "error", err)
		os.Exit(1)
	}
}

// run starts the service and blocks until ctx is cancelled (SIGINT, SIGTERM), then
// shuts down in order: stop consuming, stop the relay and the sweeper, wait for the lock
// releases, stop HTTP, flush telemetry, close the clients.
func run(ctx context.Context, cfg Config) (err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	d, err := open(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		// 5 and 6: flush telemetry, then close the clients.
		closing, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		err = errors.Join(err, d.close(closing))
	}()

	// The dead-letter archive keeps the full original of a record whose dead letter the
	// broker refuses (too large, topic gone), so that nothing is lost and the partition
	// moves on.
	archive, err := consumer.NewDeadLetterArchive(d.pool, "")
	if err != nil {
		return err
	}
	if err := migrateAll(ctx, d.pool); err != nil {
		return err
	}
	if err := createTopics(ctx, d.kafka, cfg); err != nil {
		return err
	}

	// The outbox and its relay. NewRelay links them: while this instance's relay
	// leads, ob.Wake signals it in memory; otherwise Wake sends a coalesced NOTIFY
	// (WithNotifier) to the leader in another instance. The relay shares the Kafka client
	// with the dead-letter producer.
	ob, err := outbox.New(outbox.WithNotifier(d.pool))
	if err != nil {
		return err
	}
	relay, err := outbox.NewRelay(d.pool, d.kafka, ob, outbox.WithEntityAttribute("order.id"),
		outbox.WithTracerProvider(d.tel.TracerProvider), outbox.WithMeterProvider(d.tel.MeterProvider), outbox.WithLogger(log))
	if err != nil {
		return err
	}

	// The consumer: the standard chain (tracing, metrics, logs, dead letters, retries,
	// per-order Redis lease with fencing, idempotency) around the business handler.
	locker, err := lock.New(d.rdb, lock.WithNamespace(cfg.LockNamespace))
	if err != nil {
		return err
	}
	sched := &scheduler{outbox: ob, topic: cfg.ShippingTopic}
	router := consumer.NewRouter().
		Handle(typeOrderConfirmed, sched.schedule).
		Ignore(otherOrderTypes...)
	h, err := consumer.Standard(consumer.StandardConfig{
		DB:                d.pool,
		Router:            router,
		DeadLetter:        d.kafka,
		DeadLetterArchive: archive,
		Locker:            locker,
		Fence:             true,
		Name:              "schedule",        // idempotency scope "<group>/schedule"
		AfterCommit:       []func(){ob.Wake}, // wake the relay after each COMMIT
		EntityAttribute:   "order.id",        // the record key in spans and logs
		Logger:            log,
		TracerProvider:    d.tel.TracerProvider,
		Propagator:        d.tel.Propagator,
		MeterProvider:     d.tel.MeterProvider,
	})
	if err != nil {
		return err
	}
	// WithDeadLetterTopics: Run refuses to start while <topic>.dlq is missing.
	c, err := consumer.New(cfg.Brokers, cfg.Group, []string{cfg.OrdersTopic}, h,
		consumer.WithDeadLetterTopicCheck(), consumer.WithLogger(log), consumer.WithMeterProvider(d.tel.MeterProvider))
	if err != nil {
		return err
	}

	// Expired idempotency records (default retention 7 days) are deleted in batches;
	// every instance may run a sweeper.
	sweeper, err := idempotency.NewSweeper(d.pool, idempotency.WithSweepHook(func(n int64, err error) {
		if err != nil {
			log.Warn("shipping: idempotency sweep failed", "error", err)
		}
	}))
	if err != nil {
		return err
	}

	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return err
		}
	}
	srv := &http.Server{Handler: routes(d.tel, c), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()

	// The relay and the sweeper run until the consumer has stopped. A relay that
	// cannot run (e.g. an unsafe Kafka client) stops the service.
	consuming, stopConsuming := context.WithCancel(ctx)
	defer stopConsuming()
	background, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()
	var wg sync.WaitGroup
	var relayErr error
	wg.Go(func() {
		if relayErr = relay.Run(background); relayErr != nil {
			stopConsuming()
		}
	})
	wg.Go(func() { _ = sweeper.Run(background) })
	log.Info("shipping: running", "http", ln.Addr().String(), "group", cfg.Group, "topic", cfg.OrdersTopic)

	// 1. Consume until ctx is cancelled; Run then stops fetching, lets in-flight records
	//    finish, commits their offsets and leaves the group.
	err = c.Run(consuming)
	// 2. The relay publishes the batch in flight and steps down (a standby takes over;
	//    rows left in the table are published by the next leader); the sweeper stops.
	stopBackground()
	wg.Wait()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	// 3. Leases are released in the background; let the last releases reach Redis.
	waitErr := locker.Wait(stopCtx)
	// 4. HTTP last among the workers, so /metrics and /healthz answer until here.
	httpErr := srv.Shutdown(stopCtx)
	return errors.Join(err, relayErr, waitErr, httpErr) // then 5 and 6, deferred above
}
