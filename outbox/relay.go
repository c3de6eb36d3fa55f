package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/internal/backoff"
	"github.com/choreo-saga/choreo/tracing"
)

// Relay publishes committed outbox rows to Kafka, in id order, and deletes each
// row once the broker acknowledged it. Any number of relays may run on one
// table (one per service instance): they elect a single leader with a Postgres
// session advisory lock, and the others stand by. See the package
// documentation for the guarantees.
type Relay struct {
	pool   *pgxpool.Pool
	client *kgo.Client
	outbox *Outbox
	cfg    relayConfig
	names  names

	wake    chan struct{} // buffered(1): coalesced wake-ups for the leader
	leader  atomic.Bool
	running atomic.Bool
	linger  bool    // the client lingers before sending: flush after each batch
	last    sent    // the leader's last batch (used by the leader's goroutine only)
	limits  *limits // topics' max.message.bytes (used by the leader's goroutine only)

	kafka   *tracing.Kafka
	metrics *relayMetrics
	log     *slog.Logger
}

// Published describes one outbox row the broker acknowledged; see [WithAfterAck].
type Published struct {
	ID        int64       // outbox row id
	Record    *kgo.Record // the record as produced; Partition and Offset are set
	CreatedAt time.Time   // when the row was inserted (database clock)
	AckedAt   time.Time   // when the broker acknowledged it (relay clock)
}

type relayConfig struct {
	batchSize       int
	batchLinger     time.Duration
	pollInterval    time.Duration
	floorInterval   time.Duration
	takeover        time.Duration
	backoffMin      time.Duration
	backoffMax      time.Duration
	shutdownTimeout time.Duration
	meterProvider   metric.MeterProvider
	tracerProvider  trace.TracerProvider
	logger          *slog.Logger
	afterAck        func(ctx context.Context, batch []Published) error
	entityAttr      string
	session         *pgx.ConnConfig // WithSessionConfig; nil: the pool's
}

// Defaults of the relay options.
const (
	DefaultBatchSize        = 1000                   // WithBatchSize
	DefaultBatchLinger      = 3 * time.Millisecond   // WithBatchLinger
	DefaultPollInterval     = 500 * time.Millisecond // WithPollInterval
	DefaultFloorInterval    = time.Second            // WithFloorInterval
	DefaultTakeoverInterval = time.Second            // WithTakeoverInterval
	DefaultBackoffMin       = 100 * time.Millisecond // WithRetryBackoff
	DefaultBackoffMax       = time.Second            // WithRetryBackoff: a relay reconnects within 1 s of its database returning
	DefaultShutdownTimeout  = 10 * time.Second       // WithShutdownTimeout
)

// queryTimeout bounds every statement on the leader's session, so that a
// half-open connection cannot stall the relay.
const queryTimeout = 30 * time.Second

// smallBatch is the size below which a batch is small enough for the next one to
// linger (WithBatchLinger).
const smallBatch = 64

// RelayOption configures a Relay. An invalid value makes [NewRelay] return an
// error wrapping [ErrInvalidConfig].
type RelayOption func(*relayConfig) error

// invalid returns an error wrapping ErrInvalidConfig.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}

// WithBatchSize sets the most rows claimed, produced and deleted per round
// (at least 1). Default [DefaultBatchSize].
func WithBatchSize(n int) RelayOption {
	return func(c *relayConfig) error {
		if n < 1 {
			return invalid("batch size %d, want at least 1", n)
		}
		c.batchSize = n
		return nil
	}
}

// WithBatchLinger sets the shortest time between the start of a small batch (under 64 rows,
// and under the batch size) and the read of the next one: under a steady stream of
// small commits the leader then produces, acknowledges and deletes rows in fewer,
// fuller rounds instead of one round per commit. A row waits at most this long more; a
// row committed longer than this after the last batch, as at low load, is read at once.
// 0 disables it. Default [DefaultBatchLinger].
func WithBatchLinger(d time.Duration) RelayOption {
	return func(c *relayConfig) error {
		if d < 0 {
			return invalid("negative batch linger %v", d)
		}
		c.batchLinger = d
		return nil
	}
}

// WithFloorInterval sets how often the leader moves its read floor: the id its reads start
// after, below which every row is published and no transaction can still commit one. It
// keeps the leader's reads from walking the index entries of the rows it has published
// and deleted, which stay while a long transaction elsewhere (a backup, an analytics
// query, a forgotten session) holds back vacuum: a read walks those of about the last
// two intervals instead of all of them. The floor waits for the transactions writing to
// the table when it is set (see the package documentation). 0 keeps every read at the
// table's first row. Default [DefaultFloorInterval].
func WithFloorInterval(d time.Duration) RelayOption {
	return func(c *relayConfig) error {
		if d < 0 {
			return invalid("negative floor interval %v", d)
		}
		c.floorInterval = d
		return nil
	}
}

// WithPollInterval sets how long the leader waits for a wake-up (in-process signal
// or NOTIFY) before it looks at the table anyway. It bounds the delay caused by
// a lost NOTIFY or a dropped listen connection, and how quickly a leader notices
// that its database session ended. Default [DefaultPollInterval].
func WithPollInterval(d time.Duration) RelayOption {
	return func(c *relayConfig) error {
		if d <= 0 {
			return invalid("poll interval %v, want > 0", d)
		}
		c.pollInterval = d
		return nil
	}
}

// WithTakeoverInterval sets how often a standby tries to take the leader lock.
// A standby takes over at most this long after the leader's session ends.
// Default [DefaultTakeoverInterval].
func WithTakeoverInterval(d time.Duration) RelayOption {
	return func(c *relayConfig) error {
		if d <= 0 {
			return invalid("takeover interval %v, want > 0", d)
		}
		c.takeover = d
		return nil
	}
}

// WithRetryBackoff sets the bounds of the exponential backoff with full jitter used
// after broker and database errors: the n-th retry (from 0) waits a random
// duration in (0, min(max, min·2ⁿ)]. 0 < minDelay <= maxDelay. Defaults
// [DefaultBackoffMin] and [DefaultBackoffMax].
func WithRetryBackoff(minDelay, maxDelay time.Duration) RelayOption {
	return func(c *relayConfig) error {
		if minDelay <= 0 || maxDelay < minDelay {
			return invalid("backoff %v..%v, want 0 < min <= max", minDelay, maxDelay)
		}
		c.backoffMin, c.backoffMax = minDelay, maxDelay
		return nil
	}
}

// WithShutdownTimeout sets how long Run, once its context is cancelled, still works:
// it waits for the acks of the batch in flight, then publishes (a final drain) what
// was committed before the cancellation, deleting the rows it got acks for. After it,
// the rest is abandoned: its rows stay and the next leader publishes them. Zero skips
// the final drain.
// Default [DefaultShutdownTimeout].
func WithShutdownTimeout(d time.Duration) RelayOption {
	return func(c *relayConfig) error {
		if d < 0 {
			return invalid("negative shutdown timeout %v", d)
		}
		c.shutdownTimeout = d
		return nil
	}
}

// WithMeterProvider sets where the relay's metrics go. Default otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) RelayOption {
	return func(c *relayConfig) error {
		if mp == nil {
			return invalid("nil meter provider")
		}
		c.meterProvider = mp
		return nil
	}
}

// WithTracerProvider sets where the relay's produce spans go. Default otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) RelayOption {
	return func(c *relayConfig) error {
		if tp == nil {
			return invalid("nil tracer provider")
		}
		c.tracerProvider = tp
		return nil
	}
}

// WithEntityAttribute names the span attribute that carries the record key on
// produce spans, e.g. "order.id", so a search by entity id finds the relay's
// span too (saga.correlation_id is always set from the ce_correlationid
// header). Use it only when every topic this relay produces to is keyed by
// that entity. Default: none.
func WithEntityAttribute(name string) RelayOption {
	return func(c *relayConfig) error {
		if name == "" {
			return invalid("empty entity attribute name")
		}
		c.entityAttr = name
		return nil
	}
}

// WithLogger sets the logger for leadership changes and retried errors. Default slog.Default().
func WithLogger(l *slog.Logger) RelayOption {
	return func(c *relayConfig) error {
		if l == nil {
			return invalid("nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithAfterAck sets a hook called with every batch of rows the broker acknowledged,
// before those rows are deleted. If it returns an error, Run stops and returns
// it wrapped in [ErrHook] without deleting the rows: they are published again
// by the next leader. It exists for observation (e.g. end-to-end latency in
// benchmarks) and for fault injection in tests (a crash between ack and
// delete); it must not block. Default: none.
func WithAfterAck(fn func(ctx context.Context, batch []Published) error) RelayOption {
	return func(c *relayConfig) error {
		if fn == nil {
			return invalid("nil after-ack hook")
		}
		c.afterAck = fn
		return nil
	}
}

// WithSessionConfig makes the relay open its two sessions (the one that holds the leader
// lock and does every read and delete, and the LISTEN one) with cc instead of the pool's
// configuration. Use it when the pool reaches Postgres through a pooler in transaction
// mode (PgBouncer's pool_mode = transaction), where a session advisory lock and LISTEN do
// not hold: cc must reach Postgres directly or through a session-mode pool, on the same
// database. cc is copied; the relay still sets application_name and, on the leader's
// session, synchronous_commit. Default: the pool's configuration.
func WithSessionConfig(cc *pgx.ConnConfig) RelayOption {
	return func(c *relayConfig) error {
		if cc == nil {
			return invalid("nil session config")
		}
		c.session = cc.Copy()
		return nil
	}
}

// NewRelay returns a relay that publishes the rows of ob's table, reading them
// through pool's configuration and producing with client. While it leads,
// ob.Wake wakes it in memory without a NOTIFY: share ob with the writers of
// this process. The client must be an idempotent producer with acks=all
// (franz-go's defaults); otherwise NewRelay returns an error wrapping
// [ErrUnsafeClient]. An invalid option makes it return one wrapping
// [ErrInvalidConfig].
//
// The relay opens its own two connections from pool.Config() (one that holds
// the leader lock and does all reads and deletes, one that LISTENs; see
// [WithSessionConfig] for another configuration), so the
// pool's AfterConnect hook does not run on them; put session settings such as
// search_path in the connection string. pool itself serves only the backlog
// metrics.
func NewRelay(pool *pgxpool.Pool, client *kgo.Client, ob *Outbox, opts ...RelayOption) (*Relay, error) {
	if pool == nil || ob == nil {
		return nil, fmt.Errorf("%w: nil pool or outbox", ErrInvalidConfig)
	}
	if err := checkClient(client); err != nil {
		return nil, err
	}
	cfg := relayConfig{
		batchSize:       DefaultBatchSize,
		batchLinger:     DefaultBatchLinger,
		pollInterval:    DefaultPollInterval,
		floorInterval:   DefaultFloorInterval,
		takeover:        DefaultTakeoverInterval,
		backoffMin:      DefaultBackoffMin,
		backoffMax:      DefaultBackoffMax,
		shutdownTimeout: DefaultShutdownTimeout,
		meterProvider:   otel.GetMeterProvider(),
		tracerProvider:  otel.GetTracerProvider(),
		logger:          slog.Default(),
	}
	for _, opt := range opts {
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	r := &Relay{
		pool:   pool,
		client: client,
		outbox: ob,
		cfg:    cfg,
		names:  ob.names,
		wake:   make(chan struct{}, 1),
		kafka:  tracing.NewKafka(tracing.WithTracerProvider(cfg.tracerProvider)),
		log:    cfg.logger.With("outbox_table", ob.names.table),
	}
	r.limits = newLimits(client)
	if d, ok := client.OptValue(kgo.ProducerLinger).(time.Duration); ok && d > 0 {
		r.linger = true
	}
	m, err := newRelayMetrics(cfg.meterProvider.Meter(instrumentationName), r.names.table)
	if err != nil {
		return nil, err
	}
	r.metrics = m
	return r, nil
}

const instrumentationName = "github.com/choreo-saga/choreo/outbox"

// Leader reports whether this relay currently holds the leader lock.
func (r *Relay) Leader() bool { return r.leader.Load() }

// Run campaigns for leadership and, while leading, publishes rows until ctx is
// cancelled; a standby keeps campaigning. A lost database session or broker
// trouble is retried with backoff and never ends Run. On cancellation Run
// finishes the batch in flight (see [WithShutdownTimeout]), releases the lock and
// returns nil. It returns an error for a closed Kafka client, for a failing
// [WithAfterAck] hook, and [ErrRunning] if this Relay is already running.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer r.running.Store(false)

	unregister, err := r.metrics.observe(r)
	if err != nil {
		return err
	}
	defer unregister()

	attempt := 0
	for {
		led, err := r.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrHook) || errors.Is(err, kgo.ErrClientClosed) {
			return err
		}
		if led {
			attempt = 0
		}
		delay := r.backoff(attempt)
		r.log.Warn("outbox relay: session ended, reconnecting", "err", err, "retry_in", delay)
		if !sleep(ctx, delay) {
			return nil
		}
		attempt++
	}
}

// checkClient rejects clients that could lose, duplicate or reorder records.
func checkClient(cl *kgo.Client) error {
	if cl == nil {
		return fmt.Errorf("%w: nil client", ErrUnsafeClient)
	}
	if v, ok := cl.OptValue(kgo.DisableIdempotentWrite).(bool); ok && v {
		return fmt.Errorf("%w: idempotent writes are disabled", ErrUnsafeClient)
	}
	if v, ok := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); ok && v != kgo.AllISRAcks() {
		return fmt.Errorf("%w: acks is not all", ErrUnsafeClient)
	}
	if v, ok := cl.OptValue(kgo.TransactionalID).(string); ok && v != "" {
		return fmt.Errorf("%w: a transactional client cannot produce outside a transaction", ErrUnsafeClient)
	}
	return nil
}

// connect opens a dedicated session (outside the pool) named for role, so
// operators can find it in pg_stat_activity.
func (r *Relay) connect(ctx context.Context, role string) (*pgx.Conn, error) {
	var cc *pgx.ConnConfig
	if r.cfg.session != nil {
		cc = r.cfg.session.Copy()
	} else {
		cc = r.pool.Config().ConnConfig // a deep copy
	}
	cc.RuntimeParams["application_name"] = "choreo-outbox-" + role + " " + r.names.table
	if role == "relay" {
		// The leader's only writes are deletes of published rows and moves to
		// the dead-letter table. Losing one in a Postgres crash republishes a
		// row, which at-least-once delivery allows, so they need not wait for
		// the WAL flush.
		cc.RuntimeParams["synchronous_commit"] = "off"
	}
	cctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cc)
	if err != nil {
		return nil, fmt.Errorf("outbox: connect (%s): %w", role, err)
	}
	return conn, nil
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx) // closing the session releases its advisory lock
}

// session connects, waits to become leader, and leads until the session or
// ctx ends. led reports whether it became leader.
func (r *Relay) session(ctx context.Context) (led bool, err error) {
	conn, err := r.connect(ctx, "relay")
	if err != nil {
		return false, err
	}
	defer closeConn(conn)
	for {
		var ok bool
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		err := conn.QueryRow(qctx, "SELECT pg_try_advisory_lock($1)", r.names.lockKey).Scan(&ok)
		cancel()
		if err != nil {
			return false, fmt.Errorf("outbox: campaign: %w", err)
		}
		if ok {
			break
		}
		if !sleep(ctx, r.cfg.takeover) {
			return false, ctx.Err()
		}
	}
	r.log.Info("outbox relay: became leader")
	err = r.lead(ctx, conn)
	r.log.Info("outbox relay: stepped down", "err", err)
	return true, err
}

// lead runs the leader loop on conn, whose session holds the leader lock.
// Every read and delete goes through this session, so once it is gone no
// statement of this relay can succeed: a deposed leader cannot delete rows.
func (r *Relay) lead(ctx context.Context, conn *pgx.Conn) error {
	r.leader.Store(true)
	defer r.leader.Store(false)
	wake := r.wake
	ob := r.outbox
	ob.leaderWake.Store(&wake)
	defer ob.leaderWake.CompareAndSwap(&wake, nil)

	lctx, stopListen := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { r.listen(lctx) })
	defer func() {
		stopListen()
		wg.Wait()
	}()

	f, err := r.newFloor(ctx, conn)
	if err != nil {
		return err
	}
	timer := time.NewTimer(r.cfg.pollInterval)
	defer timer.Stop()
	for {
		if err := r.drain(ctx, conn, f); err != nil && ctx.Err() == nil {
			return err
		}
		if ctx.Err() != nil {
			return r.finalDrain(ctx, conn, f)
		}
		timer.Reset(r.cfg.pollInterval)
		select {
		case <-ctx.Done():
			return r.finalDrain(ctx, conn, f)
		case <-r.wake:
		case <-timer.C:
		}
	}
}

// finalDrain publishes, once Run's context is cancelled, what was committed before:
// a service that enqueues during its own shutdown (a last event from a worker that
// stops before the relay) gets it out now rather than at the next start. It is
// bounded by the shutdown timeout; rows it does not reach stay for the next leader.
func (r *Relay) finalDrain(ctx context.Context, conn *pgx.Conn, f *floor) error {
	if r.cfg.shutdownTimeout <= 0 {
		return nil
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.shutdownTimeout)
	defer cancel()
	if err := r.drain(dctx, conn, f); err != nil && dctx.Err() == nil {
		return fmt.Errorf("outbox: final drain: %w", err)
	}
	return nil
}

// signal wakes the leader loop; wake-ups coalesce.
func (r *Relay) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// listen keeps a LISTEN session open while the relay leads, turning each
// notification into a wake-up, and reconnects with backoff when it drops.
// After every (re)connect it wakes the leader once, for anything committed
// while nobody listened.
func (r *Relay) listen(ctx context.Context) {
	attempt := 0
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, func() { attempt = 0 })
		if ctx.Err() != nil {
			return
		}
		delay := r.backoff(attempt)
		r.log.Warn("outbox relay: listen connection lost, relying on polling until it is back", "err", err, "retry_in", delay)
		if !sleep(ctx, delay) {
			return
		}
		attempt++
	}
}

func (r *Relay) listenOnce(ctx context.Context, connected func()) error {
	conn, err := r.connect(ctx, "listen")
	if err != nil {
		return err
	}
	defer closeConn(conn)
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	_, err = conn.Exec(qctx, "LISTEN "+pgx.Identifier{r.names.channel}.Sanitize())
	cancel()
	if err != nil {
		return fmt.Errorf("outbox: listen: %w", err)
	}
	connected()
	r.signal()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("outbox: wait for notification: %w", err)
		}
		r.signal()
	}
}

// backoff returns the delay before retry number attempt (from 0): exponential
// growth from backoffMin capped at backoffMax, with full jitter.
func (r *Relay) backoff(attempt int) time.Duration {
	return backoff.Policy{Base: r.cfg.backoffMin, Max: r.cfg.backoffMax}.Delay(attempt + 1)
}

// sleep waits for d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	return backoff.Sleep(ctx, d, nil)
}
