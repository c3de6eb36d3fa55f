package consumer

import (
	"context"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/tracing"
)

// StandardConfig configures Standard. DB, DeadLetter and one of Handler or Router are
// required; every other zero field takes the default of the middleware it configures.
type StandardConfig struct {
	// DB opens the handlers' transactions (a *pgxpool.Pool). Required.
	DB migrate.Beginner
	// Router routes events by type. Set Router or Handler.
	Router *Router
	// Handler handles every event. Set Router or Handler.
	Handler TxHandler
	// DeadLetter publishes dead-lettered records (a *kgo.Client). Required.
	DeadLetter Producer
	// DeadLetterArchive, if set, keeps the original (bounded) of records the dead-letter topic
	// refuses (too large, or the topic is missing), so they are settled instead of
	// blocking their partition (see DeadLetter). Migrate it first. Default: none.
	DeadLetterArchive *DeadLetterArchive
	// DeadLetterValueBytes bounds the value of a bounded dead-letter copy (0: the
	// default DefaultDeadLetterValueBytes; a negative value is an ErrInvalidConfig).
	DeadLetterValueBytes int
	// TrustedKeys, if set, maps a source (ce_source) to the keys its events must be
	// signed with, as Router.TrustKeys does for one source: an event of such a source
	// without a valid signature by one of them is dead-lettered as "bad_signature".
	// Sources not in the map are not checked. Default: none.
	TrustedKeys map[string]*event.KeySet
	// Upcasters, if set, bring each event to a schema version its handler declares
	// before the lock and the transaction (see Upcast). Default: none.
	Upcasters *Upcasters
	// Locker, if set, serialises handling per entity (a *lock.Locker).
	Locker Locker
	// LockEntity chooses the entity to lock (default Message.Subject), with the record's
	// context, before the transaction opens (a batch takes the locks of all its records
	// before its transaction); "" locks nothing, an error fails the record (see Lock).
	LockEntity func(ctx context.Context, m *Message) (string, error)
	// Fence checks the lease's fencing token in the transaction (see IdempotentConfig).
	Fence bool
	// Store records idempotency keys (default idempotency.NewStore()).
	Store *idempotency.Store
	// Name is the handler's name in the idempotency scope "<group>/<Name>" (default
	// "handler").
	Name string
	// AfterCommit functions run after each commit, e.g. outbox.Outbox.Wake.
	AfterCommit []func()
	// Retry is the retry policy (zero value: the RetryConfig defaults). When
	// Retry.Probes.Postgres is nil and DB has a Ping method (a *pgxpool.Pool does), DB's
	// Ping is the Postgres probe that confirms outages (see Retry).
	Retry RetryConfig
	// Decode options, e.g. event.WithMaxPayloadBytes, for the default decoder; an invalid
	// one is Standard's error.
	Decode []event.DecodeOption
	// Decoder turns records into events (default event.FromRecord with the Decode
	// options); set it for producers that do not write CloudEvents (see Decoder).
	Decoder Decoder
	// EntityAttribute names the entity in spans and logs, e.g. "order.id" (default
	// DefaultEntityAttribute).
	EntityAttribute string
	// Logger logs one line per record (default slog.Default()).
	Logger *slog.Logger
	// TracerProvider, Propagator and MeterProvider default to the otel globals.
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
	MeterProvider  metric.MeterProvider
}

func (cfg *StandardConfig) validate() error {
	switch {
	case cfg.DB == nil:
		return fmt.Errorf("%w: StandardConfig.DB is required", ErrInvalidConfig)
	case cfg.DeadLetter == nil:
		return fmt.Errorf("%w: StandardConfig.DeadLetter is required", ErrInvalidConfig)
	case (cfg.Router == nil) == (cfg.Handler == nil):
		return fmt.Errorf("%w: set exactly one of StandardConfig.Router and StandardConfig.Handler", ErrInvalidConfig)
	}
	return nil
}

func (cfg *StandardConfig) tracingOptions() []tracing.InstrumentOption {
	var opts []tracing.InstrumentOption
	if cfg.TracerProvider != nil {
		opts = append(opts, tracing.WithTracerProvider(cfg.TracerProvider))
	}
	if cfg.Propagator != nil {
		opts = append(opts, tracing.WithPropagator(cfg.Propagator))
	}
	return opts
}

// Standard returns the chain every choreo consumer runs, outermost first:
//
//	Recover → Tracing → Correlate → Metrics → Logging → DeadLetter → Retry →
//	Recover → Decode → VerifySignatures → Router.Filter → Upcast → Lock → Idempotent →
//	business handler(ctx, tx, event)
//
// DeadLetter sits outside Retry because only the outcome of all attempts decides whether
// a record is dead-lettered; Decode, the router's filter and the inner Recover sit inside
// both, so undecodable records, unknown types and panics are dead-lettered at once
// instead of blocking the partition; VerifySignatures runs only with
// StandardConfig.TrustedKeys and Upcast only with StandardConfig.Upcasters, after the
// checks that need the record as produced. Lock sits inside Retry, so "not obtained"
// backs off.
//
// The configuration is resolved once, every default applied, and StandardBatch resolves
// it the same way and runs the same parts, so both paths decode, filter,
// lock, claim, trace, log and count a record alike.
func Standard(cfg StandardConfig) (Handler, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	deadLetter, err := newDeadLetter(cfg.DeadLetter, c.deadLetterOptions(cfg)...)
	if err != nil {
		return nil, err
	}

	mws := []Middleware{
		recoverPanics(),
		traced(c.kafka),
		correlate(c.entityAttr),
		c.ins.middleware(),
		logOutcome(c.logger),
		deadLetter,
		retryInPlace(cfg.retryConfig()),
		recoverPanics(),
		decodeWith(c.decode),
	}
	if len(c.keys) > 0 {
		mws = append(mws, verifySignatures(c.keys))
	}
	if c.router != nil {
		mws = append(mws, c.router.Filter())
	}
	if c.upcasters != nil {
		mws = append(mws, upcastRecord(c.upcasters))
	}
	if c.locker != nil {
		mws = append(mws, holdLock(c.locker, c.lockEntity))
	}
	return wrap(c.tx.handle, mws...), nil
}

// retryConfig returns cfg.Retry with DB's Ping as the Postgres probe unless one is set.
func (cfg *StandardConfig) retryConfig() RetryConfig {
	rc := cfg.Retry
	if rc.Probes.Postgres == nil {
		if p, ok := cfg.DB.(interface{ Ping(context.Context) error }); ok {
			rc.Probes.Postgres = p.Ping
		}
	}
	return rc
}

// deadLetterOptions returns the options of the dead-letter middleware cfg asks for.
func (c *chain) deadLetterOptions(cfg StandardConfig) []deadLetterOption {
	opts := []deadLetterOption{deadLetterLogger(c.logger)}
	if cfg.DeadLetterArchive != nil {
		opts = append(opts, deadLetterArchiveTo(cfg.DeadLetterArchive))
	}
	if cfg.DeadLetterValueBytes != 0 {
		opts = append(opts, deadLetterValueBytes(cfg.DeadLetterValueBytes))
	}
	return opts
}
