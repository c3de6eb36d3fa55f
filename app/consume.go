package app

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
)

// consumerSpec describes one consumer group of a service; see consume.
type consumerSpec struct {
	// Group is the Kafka consumer group. Required.
	Group string
	// Topics are consumed by the group. Required. The group also consumes its retry
	// topic of each, "<topic>.retry.<group>" (consumer.WithRetryTopics), where `sagactl
	// dlq replay` sends the records this group dead-lettered. Run creates each topic, its
	// dead-letter and its retry topic if missing (with Config.KafkaPartitions partitions;
	// a creation the broker refuses is logged), and the consumer then fails at start,
	// with an error matching consumer.ErrMissingTopic, if one still does not exist. A
	// dead letter the topic
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

// consume registers a consumer group running the standard middleware chain
// (consumer.Standard): the App's pool for transactions, its Kafka client for the
// dead-letter topics, its locker with fencing (when Redis is configured), its
// idempotency store, and Outbox.Wake after every commit. It starts with Run and is
// drained in Run's shutdown, before the relay stops.
//
// In-flight handlers get half of Config.ShutdownTimeout to finish once Run begins
// shutting down; then their context is cancelled. The group member uses
// Config.KafkaInstanceID (static membership),
// Config.KafkaSessionTimeout and Config.KafkaRebalanceTimeout; spec.Options may override
// them. /readyz reports its Health under "consumer <group>" (consumerCheck: outage or
// stalled partitions) and its assignment under "consumer <group> partitions": not ready
// when it has held no partition for longer than the session plus the rebalance timeout
// while the group has lag.
func (a *App) consume(spec consumerSpec) error {
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
		Decode:            []event.DecodeOption{event.WithMaxPayloadBytes(a.Config.maxRecordBytes())},
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
		// Confirms outages of unknown origin (consumer.Standard's retry step); Standard adds the pool's Ping.
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
		consumer.WithMaxRecordBytes(a.Config.maxRecordBytes()),
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
		session = defaultKafkaSessionTimeout
	}
	if rebalance == 0 {
		rebalance = defaultKafkaRebalanceTimeout
	}
	kopts := []kgo.Opt{kgo.SessionTimeout(session), kgo.RebalanceTimeout(rebalance)}
	if a.Config.KafkaInstanceID != "" {
		kopts = append(kopts, kgo.InstanceID(a.Config.KafkaInstanceID))
	}
	copts = append(copts, consumer.WithClientOptions(kopts...))
	copts = append(copts, spec.Options...)
	for _, t := range spec.Topics {
		a.topics = append(a.topics, t, consumer.DeadLetterTopic(t), consumer.RetryTopic(t, spec.Group))
	}
	c, err := consumer.New(a.Config.KafkaBrokers, spec.Group, spec.Topics, h, copts...)
	if err != nil {
		return fmt.Errorf("app: consumer %s: %w", spec.Group, err)
	}
	a.consumers = append(a.consumers, component{name: "consumer " + spec.Group, run: c.Run, mustRun: true})
	a.checks = append(a.checks, namedCheck{"consumer " + spec.Group, consumerCheck(c)})
	// A healthy group hands a member partitions within a session timeout (a dead member
	// expires) plus a rebalance timeout (the others rejoin).
	a.checks = append(a.checks, namedCheck{"consumer " + spec.Group + " partitions",
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

// EnsureTopics creates topics and their dead-letter topics (topic +
// consumer.DeadLetterSuffix) with Config.KafkaPartitions partitions if they do not exist
// (see [EnsureTopics]), now rather than in Run (see [WithTopics]).
func (a *App) EnsureTopics(ctx context.Context, topics ...string) error {
	all := append([]string(nil), topics...)
	for _, t := range topics {
		all = append(all, consumer.DeadLetterTopic(t))
	}
	return EnsureTopics(ctx, a.Kafka, a.Config.KafkaPartitions, all...)
}
