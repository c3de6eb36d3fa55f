package ordersvc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/tracing"
)

// AttrOrderID is the span attribute (and log key) naming the order.
const AttrOrderID = "order.id"

const instrumentationName = "github.com/choreo-saga/choreo/services/order/ordersvc"

// DB is what the service needs from Postgres: a *pgxpool.Pool (or a *pgx.Conn in
// single-threaded tools).
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Settings are the order domain's settings (see Config for their environment
// variables and defaults).
type Settings struct {
	// SagaTimeout is how long an order may stay PENDING before it is cancelled
	// automatically (the durable saga deadline).
	SagaTimeout time.Duration
	// CompensationTimeout is the deadline of the first compensation attempt: how long a
	// CANCELLING order waits for the refund and the release after sending its
	// cancellation. Each re-send waits twice as long as the attempt before it, at most
	// MaxCompensationBackoff times CompensationTimeout.
	CompensationTimeout time.Duration
	// CompensationRetries is how many times the order re-sends its cancellation, at the
	// deadline of each attempt, before it moves to COMPENSATION_FAILED. 0 means
	// DefaultCompensationRetries; NoCompensationRetries fails at the first deadline.
	CompensationRetries int
	// StuckAfter is, per non-terminal state, how long an order may stay in it before it
	// counts as stuck. A state missing from the map uses DefaultStuckAfter.
	StuckAfter map[State]time.Duration
	// SweepInterval is the period of the deadline sweeper and of the stuck count (longer
	// when a round is slow: see RunSweeper).
	SweepInterval time.Duration
	// SweepBatch bounds the expired orders handled per sweep round.
	SweepBatch int
	// JaegerUIURL is the base URL of the trace UI; "" disables links.
	JaegerUIURL string
}

// Defaults of Settings.
const (
	DefaultSagaTimeout         = 2 * time.Minute
	DefaultCompensationTimeout = 30 * time.Second
	DefaultCompensationRetries = 3
	DefaultStuckAfter          = 30 * time.Second
	DefaultSweepInterval       = time.Second
	DefaultSweepBatch          = 100
)

// NoCompensationRetries as Settings.CompensationRetries disables re-sends.
const NoCompensationRetries = -1

// MaxCompensationBackoff caps the growth of the compensation attempts' deadlines: no
// attempt waits longer than this many times Settings.CompensationTimeout.
const MaxCompensationBackoff = 8

// attemptTimeout is the deadline of compensation attempt n (1 for the first send):
// CompensationTimeout doubled for each earlier attempt, capped at MaxCompensationBackoff
// times CompensationTimeout.
func (s Settings) attemptTimeout(n int) time.Duration {
	f := 1
	for i := 1; i < n && f < MaxCompensationBackoff; i++ {
		f *= 2
	}
	return s.CompensationTimeout * time.Duration(min(f, MaxCompensationBackoff))
}

func (s Settings) withDefaults() Settings {
	if s.SagaTimeout <= 0 {
		s.SagaTimeout = DefaultSagaTimeout
	}
	if s.CompensationTimeout <= 0 {
		s.CompensationTimeout = DefaultCompensationTimeout
	}
	switch {
	case s.CompensationRetries == 0:
		s.CompensationRetries = DefaultCompensationRetries
	case s.CompensationRetries < 0:
		s.CompensationRetries = 0
	}
	stuck := map[State]time.Duration{}
	for _, st := range States {
		if !st.Terminal() {
			stuck[st] = DefaultStuckAfter
		}
	}
	for st, d := range s.StuckAfter {
		if d > 0 {
			stuck[st] = d
		}
	}
	s.StuckAfter = stuck
	if s.SweepInterval <= 0 {
		s.SweepInterval = DefaultSweepInterval
	}
	if s.SweepBatch <= 0 {
		s.SweepBatch = DefaultSweepBatch
	}
	s.JaegerUIURL = strings.TrimRight(s.JaegerUIURL, "/")
	return s
}

// Option configures a Service.
type Option func(*Service)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Service) { s.log = l } }

// WithTracerProvider sets the tracer provider (default otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(s *Service) { s.tp = tp } }

// WithMeterProvider sets the meter provider (default otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(s *Service) { s.mp = mp } }

// WithOutbox sets the outbox events are enqueued in (default: the default table). Share it with
// the relay (outbox.NewRelay) so commits wake the relay in memory.
func WithOutbox(o *outbox.Outbox) Option { return func(s *Service) { s.outbox = o } }

// WithPublisher sets how the service publishes the events of its transitions in their
// transactions (default app.OutboxPublisher on the outbox; the service's *app.App in
// Run). Events created by the API are queued on the outbox directly: they travel in the
// request's one-round-trip batch, outside a transaction (see queueInsert).
func WithPublisher(p app.Publisher) Option { return func(s *Service) { s.pub = p } }

// WithIdempotencyStore sets the store of Idempotency-Key records (default
// idempotency.NewStore()).
func WithIdempotencyStore(st *idempotency.Store) Option { return func(s *Service) { s.idem = st } }

// Service is the order domain: it creates orders, moves them through the transition
// table on commands and events, and finds stuck and expired ones. It is safe for
// concurrent use.
type Service struct {
	db     DB
	cfg    Settings
	outbox *outbox.Outbox
	pub    app.Publisher
	idem   *idempotency.Store
	log    *slog.Logger
	tp     trace.TracerProvider
	mp     metric.MeterProvider
	tracer trace.Tracer

	transitions metric.Int64Counter
	ignored     metric.Int64Counter
	expired     metric.Int64Counter
	resends     metric.Int64Counter
	mismatched  metric.Int64Counter

	mu    sync.Mutex // guards stuck
	stuck map[State]int64

	// Saga-level admission (pending.go).
	maxPending  int64
	pending     atomic.Int64
	shedPending atomic.Int64
	lastShedLog atomic.Int64
	shedCount   metric.Int64Counter

	// Requests answered 503 unavailable, and the last time one was logged (logOutage).
	unavailable   atomic.Int64
	lastOutageLog atomic.Int64
}

// New returns the order domain over db (a *pgxpool.Pool whose database has been
// migrated with Migrate).
func New(db DB, cfg Settings, opts ...Option) (*Service, error) {
	if db == nil {
		return nil, errors.New("ordersvc: nil db")
	}
	s := &Service{db: db, cfg: cfg.withDefaults()}
	for _, o := range opts {
		o(s)
	}
	if s.maxPending < 0 {
		return nil, fmt.Errorf("ordersvc: max pending %d is negative", s.maxPending)
	}
	if s.outbox == nil {
		ob, err := outbox.New()
		if err != nil {
			return nil, err
		}
		s.outbox = ob
	}
	if s.pub == nil {
		s.pub = app.OutboxPublisher{Outbox: s.outbox}
	}
	if s.idem == nil {
		var err error
		if s.idem, err = idempotency.NewStore(); err != nil {
			return nil, err
		}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.tp == nil {
		s.tp = otel.GetTracerProvider()
	}
	if s.mp == nil {
		s.mp = otel.GetMeterProvider()
	}
	s.tracer = s.tp.Tracer(instrumentationName)
	if err := s.initMetrics(); err != nil {
		return nil, err
	}
	return s, nil
}

// Settings returns the settings with defaults applied.
func (s *Service) Settings() Settings { return s.cfg }

// withOrder puts the saga correlation id and the order id into ctx and onto the current
// span: the demo saga's correlation id is the order id.
func withOrder(ctx context.Context, id string) context.Context {
	ctx = tracing.WithCorrelationID(ctx, id)
	ctx = tracing.WithEntity(ctx, AttrOrderID, id)
	tracing.AnnotateSpan(ctx)
	return ctx
}

// sagaSpan starts a span for work on an existing order that continues the saga's trace
// (the span stored at creation is its parent) and links to the caller's span, if any.
// Events enqueued under it therefore belong to the saga's trace, which Jaeger shows as
// one tree from the POST to the last compensation.
func (s *Service) sagaSpan(ctx context.Context, name string, o Order) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	if cur := trace.SpanContextFromContext(ctx); cur.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: cur}))
	}
	parent := ctx
	if sc, ok := o.sagaSpanContext(); ok {
		parent = trace.ContextWithRemoteSpanContext(ctx, sc)
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetAttributes(attribute.String("saga.trace_id", sc.TraceID().String()))
		}
	}
	ctx, span := s.tracer.Start(parent, name, opts...)
	tracing.AnnotateSpan(ctx)
	return ctx, span
}

func endSpan(span trace.Span, err error) {
	if err != nil && !errors.Is(err, ErrInvalidTransition) && !errors.Is(err, ErrNotFound) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// outcomes holds the producers of the order's outcome events, by type.
var outcomes = map[string]app.Producer[events.OrderOutcomeV1]{
	events.OrderConfirmed: events.OrderConfirmedEvent,
	events.OrderRejected:  events.OrderRejectedEvent,
	events.OrderCancelled: events.OrderCancelledEvent,
}

// newEvent builds an outgoing event of the order, caused by cause if not nil.
// attempt numbers the sends of order.cancel_requested.
func newEvent(typ, orderID, reason string, attempt int, cause *event.Event) (event.Event, error) {
	var (
		ev  event.Event
		err error
	)
	switch typ {
	case events.OrderCancelRequested:
		ev, err = events.OrderCancelRequestedEvent.New(orderID, events.OrderCancelRequestedV1{OrderID: orderID, Reason: reason, Attempt: attempt})
	default:
		ev, err = outcomes[typ].New(orderID, events.OrderOutcomeV1{OrderID: orderID, Reason: reason})
	}
	if err != nil {
		return event.Event{}, fmt.Errorf("ordersvc: build %s: %w", typ, err)
	}
	if cause != nil {
		ev = ev.CausedBy(*cause)
	}
	return ev, nil
}
