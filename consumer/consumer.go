package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/backoff"
)

// Defaults: of the runtime options, of the middleware, of RetryConfig and Probes, and the
// bounds of what one record may cost a consumer before its handlers see it.
const (
	DefaultMaxBuffered     = 256
	DefaultMaxPollRecords  = 1000
	DefaultDrainTimeout    = 10 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
	DefaultRedeliveryMin   = 100 * time.Millisecond
	DefaultRedeliveryMax   = 10 * time.Second
	DefaultOutageMinDelay  = 100 * time.Millisecond
	DefaultOutageMaxDelay  = 30 * time.Second
	DefaultStallTimeout    = 2 * time.Minute
	// DefaultFetchMaxWait is the kgo.FetchMaxWait the consumer sets (franz-go's own
	// default is 5 s). A partition whose fetching was paused because its buffer was full
	// is fetched again only once the in-flight long poll returns; a short wait keeps it
	// from sitting idle with records waiting. A kgo.FetchMaxWait given to
	// WithClientOptions replaces it.
	DefaultFetchMaxWait = 250 * time.Millisecond
	// DefaultCommitInterval is how often the offsets of settled records are committed
	// (WithCommitInterval). After a crash (kill -9) the records settled since the last
	// commit are handled again and absorbed as duplicates; the interval bounds that
	// window (franz-go's own default is 5 s).
	DefaultCommitInterval = 100 * time.Millisecond

	// DeadLetterSuffix names a source topic's dead-letter topic by default: source +
	// DeadLetterSuffix. WithDeadLetterTopics names them otherwise.
	DeadLetterSuffix = ".dlq"
	// DefaultDeadLetterValueBytes is how much of a value a bounded dead-letter copy keeps
	// by default (see DeadLetterValueBytes).
	DefaultDeadLetterValueBytes = 64 << 10
	// DefaultArchiveValueBytes is how much of a value a dead-letter archive row keeps by
	// default (see ArchiveValueBytes): twice the decoder's default payload limit.
	DefaultArchiveValueBytes = 2 << 20
	// DefaultDeadLetterTable is the archive table of NewDeadLetterArchive when no table
	// name is given. It is created in the first schema of the connection's search_path.
	DefaultDeadLetterTable = "choreo_dead_letters"
	// DefaultEntityAttribute is the span attribute and log key that names the entity id
	// when none is configured (Correlate, StandardConfig.EntityAttribute).
	DefaultEntityAttribute = "entity.id"

	// Defaults of RetryConfig. With them a failing record is retried for up to a minute: the
	// backoff bound doubles from 100ms to its 5s cap (reached before the 7th attempt), and
	// attempts go on, about 2.5s apart on average, until the next one would start more than
	// a minute after the first. There is no count limit by default, so the minute is the
	// budget that actually applies.
	DefaultRetryMaxAttempts = 0 // no count limit: DefaultRetryMaxElapsed bounds the retries
	DefaultRetryBaseDelay   = 100 * time.Millisecond
	DefaultRetryMaxDelay    = 5 * time.Second
	DefaultRetryMaxElapsed  = time.Minute

	// DefaultProbeTimeout bounds one probe of a dependency (Probes.Timeout).
	DefaultProbeTimeout = time.Second
	// DefaultOutageConfirmations is how many times a record must fail with an outage-class
	// error while the probes answer before Retry counts it as the record's failure.
	DefaultOutageConfirmations = 5

	// DefaultMaxRecordBytes is the record size the consumer's fetch limits are set from
	// (WithMaxRecordBytes): the decoder's default payload limit.
	DefaultMaxRecordBytes = event.DefaultMaxPayloadBytes
	// MinMaxRecordBytes and MaxMaxRecordBytes bound WithMaxRecordBytes.
	MinMaxRecordBytes = 1 << 10
	MaxMaxRecordBytes = 64 << 20
)

const (
	finalCommitTimeout  = 10 * time.Second
	instrumentationName = "github.com/choreo-saga/choreo/consumer"
	lagMetricName       = "choreo.consumer.lag"
	bufferedMetricName  = "choreo.consumer.buffered"
	outageMetricName    = "choreo.consumer.outage"
	stalledMetricName   = "choreo.consumer.stalled"
	maxStallCheck       = 5 * time.Second // the stall monitor looks at least this often
)

type config struct {
	clientOpts      []kgo.Opt
	maxBuffered     int
	maxPollRecords  int
	drainTimeout    time.Duration
	shutdownTimeout time.Duration
	redelivery      backoff.Policy
	outage          backoff.Policy
	stallTimeout    time.Duration
	commitInterval  time.Duration
	logger          *slog.Logger
	meterProvider   metric.MeterProvider
	batchMax        int
	batch           BatchHandler
	dlqTopic        func(source string) string // nil: no check at start
	retryTopics     bool                       // WithRetryTopics
	maxRecordBytes  int                        // WithMaxRecordBytes
}

// Option configures a Consumer. An invalid value makes New return an error wrapping
// ErrInvalidConfig.
type Option func(*config) error

// invalidOption is the error of an option whose value cannot work.
func invalidOption(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// WithClientOptions adds franz-go client options (TLS, SASL, fetch sizes, session timeout,
// kgo.ConsumeResetOffset, ...). The consumer sets the group, topics, commit mode and
// partition callbacks itself; options that override those break its guarantees. It also
// sets kgo.FetchMaxWait to DefaultFetchMaxWait; a kgo.FetchMaxWait given here wins.
func WithClientOptions(opts ...kgo.Opt) Option {
	return func(c *config) error { c.clientOpts = append(c.clientOpts, opts...); return nil }
}

// WithMaxBuffered bounds the records buffered per partition waiting for its worker
// (default DefaultMaxBuffered). When a partition's buffer reaches the bound, fetching that
// partition pauses until the worker has drained half of it. One poll can overshoot the
// bound by at most its own size (see WithMaxPollRecords).
func WithMaxBuffered(n int) Option {
	return func(c *config) error {
		if !(n > 0) {
			return invalidOption("max buffered %d is not positive", n)
		}
		c.maxBuffered = n
		return nil
	}
}

// WithMaxPollRecords bounds the records taken from the client per poll, across all
// partitions (default DefaultMaxPollRecords).
func WithMaxPollRecords(n int) Option {
	return func(c *config) error {
		if !(n > 0) {
			return invalidOption("max poll records %d is not positive", n)
		}
		c.maxPollRecords = n
		return nil
	}
}

// WithDrainTimeout sets how long a worker whose partition is being revoked may spend
// finishing the record it is handling before that handler's context is cancelled (default
// DefaultDrainTimeout). Keep it well below the group's rebalance timeout.
func WithDrainTimeout(d time.Duration) Option {
	return func(c *config) error {
		if !(d > 0) {
			return invalidOption("drain timeout %v is not positive", d)
		}
		c.drainTimeout = d
		return nil
	}
}

// WithShutdownTimeout sets how long Run waits, after its context is cancelled, for
// in-flight handlers to finish (default DefaultShutdownTimeout); their context is
// cancelled when it runs out. The final offset commit then gets up to the same time,
// at most 10s.
func WithShutdownTimeout(d time.Duration) Option {
	return func(c *config) error {
		if !(d > 0) {
			return invalidOption("shutdown timeout %v is not positive", d)
		}
		c.shutdownTimeout = d
		return nil
	}
}

// WithRetryBackoff sets the pause before the runtime hands a record whose handler
// returned an error to the handler again: a full-jitter delay whose bound doubles from
// min to max (defaults DefaultRedeliveryMin and DefaultRedeliveryMax). With the standard
// chain a handler only returns such an error when even dead-lettering failed; the record
// is never skipped. Outages have their own backoff (WithOutageBackoff).
func WithRetryBackoff(minDelay, maxDelay time.Duration) Option {
	return func(c *config) error {
		if !(minDelay > 0 && maxDelay >= minDelay) {
			return invalidOption("redelivery backoff %v..%v: want 0 < min <= max", minDelay, maxDelay)
		}
		c.redelivery = backoff.Policy{Base: minDelay, Max: maxDelay}
		return nil
	}
}

// WithOutageBackoff sets the pause between the attempts at a record that failed with an
// outage (IsOutage): a full-jitter delay whose bound doubles from min to max (defaults
// DefaultOutageMinDelay and DefaultOutageMaxDelay). The record is retried without limit
// and keeps its offset; the partition's outage shows in the choreo.consumer.outage gauge
// and in Health, and is logged once when it starts and once when it ends.
func WithOutageBackoff(minDelay, maxDelay time.Duration) Option {
	return func(c *config) error {
		if !(minDelay > 0 && maxDelay >= minDelay) {
			return invalidOption("outage backoff %v..%v: want 0 < min <= max", minDelay, maxDelay)
		}
		c.outage = backoff.Policy{Base: minDelay, Max: maxDelay}
		return nil
	}
}

// WithStallTimeout sets after how long without progress a partition that has lag counts
// as stalled (default DefaultStallTimeout): it then shows in the choreo.consumer.stalled
// gauge and in Health, and is logged at Error once (and at Info once it moves again).
func WithStallTimeout(d time.Duration) Option {
	return func(c *config) error {
		if !(d > 0) {
			return invalidOption("stall timeout %v is not positive", d)
		}
		c.stallTimeout = d
		return nil
	}
}

// WithCommitInterval sets how often the offsets of settled records are committed
// (default DefaultCommitInterval); a commit is skipped when nothing was settled since the
// last one. After a crash, the records settled since the last commit are redone (and
// skipped as duplicates by Idempotent), so the interval bounds the redo window; a revoke
// and a graceful shutdown commit at once whatever the interval.
func WithCommitInterval(d time.Duration) Option {
	return func(c *config) error {
		if !(d > 0) {
			return invalidOption("commit interval %v is not positive", d)
		}
		c.commitInterval = d
		return nil
	}
}

// BatchHandler handles several records of one partition, in offset order, as one unit
// (typically one transaction). Returning nil settles all of them; an error settles none.
type BatchHandler func(ctx context.Context, ms []*Message) error

// WithBatch turns on batch mode (default off): when more than one record of a partition
// is buffered, its worker hands up to maxRecords of them at once to h (see
// StandardBatch), amortising the transaction's commit over the batch. If h fails, the
// worker hands the same records to the consumer's Handler one at a time, so a poison
// record is isolated, retried and dead-lettered exactly as without batching. A lone
// buffered record always goes to the Handler.
func WithBatch(maxRecords int, h BatchHandler) Option {
	return func(c *config) error {
		if !(maxRecords > 1 && h != nil) {
			return invalidOption("batch of %d records: want more than 1, and a handler", maxRecords)
		}
		c.batchMax, c.batch = maxRecords, h
		return nil
	}
}

// WithLogger sets the runtime's logger (default slog.Default() at New).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if !(l != nil) {
			return invalidOption("nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithMeterProvider sets the meter provider for the per-partition lag, buffer, outage
// and stall gauges (default otel.GetMeterProvider() at New).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if !(mp != nil) {
			return invalidOption("nil meter provider")
		}
		c.meterProvider = mp
		return nil
	}
}

type topicPartition struct {
	topic     string
	partition int32
}

// Consumer consumes a set of topics in a consumer group and hands every record to a
// Handler, with one worker goroutine per assigned partition. See the package
// documentation for its guarantees.
type Consumer struct {
	cfg    config
	group  string
	topics []string
	retry  []string // the retry topics (WithRetryTopics), consumed besides topics
	h      Handler
	seeds  []string

	started atomic.Bool

	mu        sync.Mutex // guards workers, idleSince and closing
	workers   map[topicPartition]*worker
	idleSince time.Time // since when workers is empty; zero while it is not
	closing   bool
	baseCtx   context.Context
}

// New returns a consumer of topics in group, reading from the seed brokers and handing
// each record to h. Nothing connects until Run.
func New(brokers []string, group string, topics []string, h Handler, opts ...Option) (*Consumer, error) {
	switch {
	case len(brokers) == 0:
		return nil, fmt.Errorf("%w: no seed brokers", ErrInvalidConfig)
	case group == "":
		return nil, fmt.Errorf("%w: empty group", ErrInvalidConfig)
	case len(topics) == 0:
		return nil, fmt.Errorf("%w: no topics", ErrInvalidConfig)
	case h == nil:
		return nil, fmt.Errorf("%w: nil handler", ErrInvalidConfig)
	}
	cfg := config{
		maxBuffered:     DefaultMaxBuffered,
		maxPollRecords:  DefaultMaxPollRecords,
		drainTimeout:    DefaultDrainTimeout,
		shutdownTimeout: DefaultShutdownTimeout,
		redelivery:      backoff.Policy{Base: DefaultRedeliveryMin, Max: DefaultRedeliveryMax},
		outage:          backoff.Policy{Base: DefaultOutageMinDelay, Max: DefaultOutageMaxDelay},
		stallTimeout:    DefaultStallTimeout,
		commitInterval:  DefaultCommitInterval,
		maxRecordBytes:  DefaultMaxRecordBytes,
		logger:          slog.Default(),
		meterProvider:   otel.GetMeterProvider(),
	}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	var retry []string
	if cfg.retryTopics {
		var err error
		if retry, err = retryTopicsOf(group, topics); err != nil {
			return nil, err
		}
	}
	return &Consumer{
		cfg:     cfg,
		group:   group,
		topics:  append([]string(nil), topics...),
		retry:   retry,
		h:       h,
		seeds:   append([]string(nil), brokers...),
		workers: make(map[topicPartition]*worker),
	}, nil
}

// clientOptions returns the options of the consumer's franz-go client. The user's
// options come after the defaults they may replace (kgo applies options in order) and
// before the ones the runtime's guarantees depend on.
func (c *Consumer) clientOptions() []kgo.Opt {
	limits, _ := FetchLimits(c.cfg.maxRecordBytes) // WithMaxRecordBytes checked it
	opts := append(append(limits,
		kgo.SeedBrokers(c.seeds...),
		kgo.ConsumerGroup(c.group),
		kgo.ConsumeTopics(append(slices.Clip(c.topics), c.retry...)...),
		kgo.FetchMaxWait(DefaultFetchMaxWait),
		kgo.AutoCommitInterval(c.cfg.commitInterval),
	), c.cfg.clientOpts...)
	return append(opts,
		kgo.AutoCommitMarks(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
	)
}

// Run joins the group and consumes until ctx is cancelled, then shuts down gracefully:
// it stops fetching, lets in-flight handlers finish (bounded by the shutdown timeout),
// commits the offsets of every settled record and leaves the group. It returns nil after
// a graceful shutdown and an error if the client could not be created or the final commit
// failed. A Consumer runs once.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return ErrRunning
	}
	c.baseCtx = context.WithValue(context.WithoutCancel(ctx), runtimeKey{}, c)
	c.mu.Lock()
	if len(c.workers) == 0 {
		c.idleSince = time.Now()
	}
	c.mu.Unlock()
	unregister, err := c.registerGauges()
	if err != nil {
		return err
	}
	defer unregister()
	cl, err := kgo.NewClient(c.clientOptions()...)
	if err != nil {
		return fmt.Errorf("consumer: new client: %w", err)
	}
	if err := c.checkTopics(ctx, cl); err != nil {
		return errors.Join(err, c.shutdown(cl))
	}

	monitorDone := make(chan struct{})
	go func() {
		defer close(monitorDone)
		c.monitor(ctx)
	}()
	c.poll(ctx, cl)
	<-monitorDone
	return c.shutdown(cl)
}

// monitor logs stalled partitions (see WithStallTimeout) until ctx is cancelled.
func (c *Consumer) monitor(ctx context.Context) {
	t := time.NewTicker(min(max(c.cfg.stallTimeout/4, time.Millisecond), maxStallCheck))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, w := range c.snapshot() {
				w.checkStall(now)
			}
		}
	}
}

// snapshot returns the current workers, sorted by topic and partition.
func (c *Consumer) snapshot() []*worker {
	c.mu.Lock()
	ws := make([]*worker, 0, len(c.workers))
	for _, w := range c.workers {
		ws = append(ws, w)
	}
	c.mu.Unlock()
	slices.SortFunc(ws, func(a, b *worker) int {
		return cmp.Or(cmp.Compare(a.tp.topic, b.tp.topic), cmp.Compare(a.tp.partition, b.tp.partition))
	})
	return ws
}

// Health returns nil while every partition this member owns is being consumed, and
// otherwise an error naming each partition in an outage (the error then matches
// ErrOutage) and each stalled one (lag and no progress for the stall timeout, see
// WithStallTimeout), with its offset and for how long. Use it for readiness: a consumer
// in an outage resumes by itself, and a stalled one needs attention. The error names
// topics and partitions only, never hosts or credentials.
func (c *Consumer) Health() error {
	now := time.Now()
	var outage, stalled []string
	for _, w := range c.snapshot() {
		if since, offset, ok := w.inOutage(); ok {
			outage = append(outage, fmt.Sprintf("%s/%d at offset %d for %v",
				w.tp.topic, w.tp.partition, offset, now.Sub(since).Round(time.Millisecond)))
		}
		if idle, ok := w.stalled(now); ok {
			l, _ := w.lag()
			stalled = append(stalled, fmt.Sprintf("%s/%d at offset %d with lag %d, no progress for %v",
				w.tp.topic, w.tp.partition, w.next.Load(), l, idle.Round(time.Millisecond)))
		}
	}
	var errs []error
	if len(outage) > 0 {
		errs = append(errs, fmt.Errorf("%w: group %s: %s", ErrOutage, c.group, strings.Join(outage, "; ")))
	}
	if len(stalled) > 0 {
		errs = append(errs, fmt.Errorf("consumer: stalled: group %s: %s", c.group, strings.Join(stalled, "; ")))
	}
	return errors.Join(errs...)
}

// poll fetches records and appends them to their partition workers' buffers until ctx is
// cancelled. It never blocks on a worker: a full buffer pauses its partition instead. With
// BlockRebalanceOnPoll no rebalance callback runs between PollRecords and AllowRebalance,
// so every polled record belongs to a live worker of the current assignment.
func (c *Consumer) poll(ctx context.Context, cl *kgo.Client) {
	for {
		fetches := cl.PollRecords(ctx, c.cfg.maxPollRecords)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			cl.AllowRebalance()
			return
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			c.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "consumer: fetch error",
				slog.String("topic", topic), slog.Int("partition", int(partition)), slog.Any("error", err))
			if tooLarge, ok := errors.AsType[*kgo.ErrDecompressTooLarge](err); ok {
				c.skipBatch(cl, tooLarge)
			}
		})
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			c.mu.Lock()
			w := c.workers[topicPartition{p.Topic, p.Partition}]
			c.mu.Unlock()
			if w == nil {
				return // not ours any more; the next owner fetches from the committed offset
			}
			w.push(p.Records, p.HighWatermark)
		})
		cl.AllowRebalance()
	}
}

// skipBatch hands the worker of e's partition the record that stands for the batch e
// names (dead-lettered as ErrBatchTooLarge by Decode) and moves the client past the batch.
func (c *Consumer) skipBatch(cl *kgo.Client, e *kgo.ErrDecompressTooLarge) {
	c.mu.Lock()
	w := c.workers[topicPartition{e.Topic, e.Partition}]
	c.mu.Unlock()
	if w == nil {
		return // not ours any more; the next owner meets the batch
	}
	w.push([]*kgo.Record{batchTooLargeRecord(e)}, -1)
	SkipBatch(cl, e)
}

func (c *Consumer) assigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	for topic, partitions := range assigned {
		for _, p := range partitions {
			tp := topicPartition{topic, p}
			if _, ok := c.workers[tp]; ok {
				continue
			}
			w := newWorker(c, cl, tp)
			c.workers[tp] = w
			go w.run()
		}
	}
	if len(c.workers) > 0 {
		c.idleSince = time.Time{}
	}
	c.cfg.logger.Debug("consumer: partitions assigned", slog.String("group", c.group), slog.Any("partitions", assigned))
}

// revoked stops the workers of the revoked partitions, letting each finish the record it
// is handling (bounded by the drain timeout), and commits every settled offset before the
// partitions are given to another member. Records still buffered are dropped: they are
// not marked, so the next owner fetches them again.
func (c *Consumer) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	c.stopWorkers(c.take(revoked), c.cfg.drainTimeout)
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		c.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "consumer: commit on revoke failed",
			slog.String("group", c.group), slog.Any("error", err))
	}
}

// lost stops the workers of partitions this member no longer owns, at once and without
// committing: another member may already be consuming them. Work cut short is redone by
// the new owner and absorbed by idempotency.
func (c *Consumer) lost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	ws := c.take(lost)
	if len(ws) > 0 {
		c.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "consumer: partitions lost; stopping their workers without committing",
			slog.String("group", c.group), slog.Any("partitions", lost))
	}
	c.stopWorkers(ws, 0)
}

func (c *Consumer) take(tps map[string][]int32) []*worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ws []*worker
	for topic, partitions := range tps {
		for _, p := range partitions {
			tp := topicPartition{topic, p}
			if w, ok := c.workers[tp]; ok {
				ws = append(ws, w)
				delete(c.workers, tp)
			}
		}
	}
	if len(ws) > 0 && len(c.workers) == 0 {
		c.idleSince = time.Now()
	}
	return ws
}

// Assigned returns how many partitions this member of the group holds and, when it
// holds none, since when: the start of Run, or the revocation or loss of its last
// partition. It is zero partitions and the zero time before Run. A member that has held
// nothing for long while its group has lag points to a wedged group (see
// docs/reliability.md).
func (c *Consumer) Assigned() (partitions int, idleSince time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.workers), c.idleSince
}

func (c *Consumer) stopWorkers(ws []*worker, grace time.Duration) {
	for _, w := range ws {
		w.stop(grace)
	}
	for _, w := range ws {
		<-w.done
	}
}

func (c *Consumer) shutdown(cl *kgo.Client) error {
	c.mu.Lock()
	c.closing = true
	ws := make([]*worker, 0, len(c.workers))
	for tp, w := range c.workers {
		ws = append(ws, w)
		delete(c.workers, tp)
	}
	if len(ws) > 0 {
		c.idleSince = time.Now()
	}
	c.mu.Unlock()

	c.stopWorkers(ws, c.cfg.shutdownTimeout)

	ctx, cancel := context.WithTimeout(c.baseCtx, min(c.cfg.shutdownTimeout, finalCommitTimeout))
	defer cancel()
	err := cl.CommitMarkedOffsets(ctx)
	if err != nil {
		err = fmt.Errorf("consumer: final commit: %w", err)
	}
	cl.CloseAllowingRebalance()
	return err
}

func (c *Consumer) registerGauges() (func(), error) {
	meter := c.cfg.meterProvider.Meter(instrumentationName)
	lag, err := meter.Int64ObservableGauge(lagMetricName,
		metric.WithUnit("{message}"),
		metric.WithDescription("Records in the partition after the last one this member settled (high watermark minus next offset)."))
	if err != nil {
		return nil, fmt.Errorf("consumer: lag gauge: %w", err)
	}
	buffered, err := meter.Int64ObservableGauge(bufferedMetricName,
		metric.WithUnit("{message}"),
		metric.WithDescription("Records fetched and waiting for the partition's worker."))
	if err != nil {
		return nil, fmt.Errorf("consumer: buffered gauge: %w", err)
	}
	outage, err := meter.Int64ObservableGauge(outageMetricName,
		metric.WithUnit("1"),
		metric.WithDescription("1 while the partition is in an outage (its record fails because a dependency is unavailable and is retried without limit), else 0."))
	if err != nil {
		return nil, fmt.Errorf("consumer: outage gauge: %w", err)
	}
	stalled, err := meter.Int64ObservableGauge(stalledMetricName,
		metric.WithUnit("1"),
		metric.WithDescription("1 while the partition has lag and has made no progress for the stall timeout, else 0."))
	if err != nil {
		return nil, fmt.Errorf("consumer: stalled gauge: %w", err)
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		now := time.Now()
		c.mu.Lock()
		defer c.mu.Unlock()
		for tp, w := range c.workers {
			attrs := metric.WithAttributes(
				semconv.MessagingSystemKafka,
				semconv.MessagingConsumerGroupName(c.group),
				semconv.MessagingDestinationName(tp.topic),
				semconv.MessagingDestinationPartitionID(strconv.Itoa(int(tp.partition))),
			)
			if l, ok := w.lag(); ok {
				o.ObserveInt64(lag, l, attrs)
			}
			o.ObserveInt64(buffered, int64(w.buffered()), attrs)
			_, _, inOutage := w.inOutage()
			o.ObserveInt64(outage, b2i(inOutage), attrs)
			_, isStalled := w.stalled(now)
			o.ObserveInt64(stalled, b2i(isStalled), attrs)
		}
		return nil
	}, lag, buffered, outage, stalled)
	if err != nil {
		return nil, fmt.Errorf("consumer: register gauges: %w", err)
	}
	return func() { _ = reg.Unregister() }, nil
}

// Lag returns, for every partition this member currently owns, the number of records
// after the last one it settled. Partitions whose position is not known yet are omitted.
func (c *Consumer) Lag() map[string]map[int32]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]map[int32]int64)
	for tp, w := range c.workers {
		if l, ok := w.lag(); ok {
			if out[tp.topic] == nil {
				out[tp.topic] = make(map[int32]int64)
			}
			out[tp.topic][tp.partition] = l
		}
	}
	return out
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
