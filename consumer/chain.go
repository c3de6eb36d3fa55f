package consumer

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/tracing"
)

// chain is a StandardConfig resolved once, every default applied: the parts that Standard
// wires as middlewares and that StandardBatch calls for each record of a batch. Each
// concern has one implementation that both paths use:
//
//   - span: tracing.Kafka.StartProcess, then finishSpan (Tracing);
//   - correlation: withCorrelation (Correlate);
//   - metrics: instruments.record (Metrics);
//   - log line: logRecord (Logging);
//   - decoding: decode (Decode);
//   - the router's filter: Router.filter (Router.Filter), with one unknown-type error;
//   - upcasting: Upcasters.apply (Upcast);
//   - the lock: acquireLeases, one lease per distinct entity (Lock);
//   - the transaction: transactor.run, fences, claims, handlers, commit, AfterCommit
//     (Idempotent);
//   - panics: recoverPanic (Recover).
type chain struct {
	kafka      *tracing.Kafka
	entityAttr string
	ins        *instruments
	logger     *slog.Logger
	decode     Decoder
	router     *Router                  // nil when the config has a Handler
	keys       map[string]*event.KeySet // StandardConfig.TrustedKeys
	upcasters  *Upcasters               // nil: none
	locker     Locker                   // nil: no lock
	lockEntity func(ctx context.Context, m *Message) (string, error)
	tx         *transactor
}

// resolve validates cfg and applies its defaults.
func (cfg *StandardConfig) resolve() (*chain, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	ins, err := newInstruments(mp)
	if err != nil {
		return nil, err
	}
	c := &chain{
		kafka:      tracing.NewKafka(cfg.tracingOptions()...),
		entityAttr: cfg.EntityAttribute,
		ins:        ins,
		logger:     cfg.Logger,
		router:     cfg.Router,
		keys:       cfg.TrustedKeys,
		upcasters:  cfg.Upcasters,
		locker:     cfg.Locker,
		lockEntity: cfg.LockEntity,
	}
	if c.entityAttr == "" {
		c.entityAttr = DefaultEntityAttribute
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.decode, err = cloudEvents(cfg.Decode); err != nil {
		return nil, err
	}
	if cfg.Decoder != nil {
		c.decode = validated(cfg.Decoder)
	}
	if c.lockEntity == nil {
		c.lockEntity = subjectEntity
	}
	h := cfg.Handler
	if cfg.Router != nil {
		h = cfg.Router.Route
	}
	c.tx, err = IdempotentConfig{
		DB:          cfg.DB,
		Store:       cfg.Store,
		Name:        cfg.Name,
		Fence:       cfg.Fence && cfg.Locker != nil,
		AfterCommit: cfg.AfterCommit,
	}.resolve(h)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// filter checks the signature against the config's TrustedKeys (VerifySignatures),
// applies the router's filter (Router.Filter), if the config has a Router, and upcasts
// a message to handle to a version its handler declares (Upcast), in Standard's order.
func (c *chain) filter(m *Message) (bool, error) {
	if err := verifySignature(c.keys, m); err != nil {
		return false, err
	}
	if c.router != nil {
		if ok, err := c.router.filter(m); !ok {
			return false, err
		}
	}
	return true, c.upcasters.apply(m)
}
