package tracker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/retention"
)

// DefaultGroup is the consumer group Run joins unless WithGroup says otherwise.
const DefaultGroup = "choreo-tracker"

// DLQSuffix is the suffix of a dead-letter topic: the dead letters of topic T are on
// T+DLQSuffix, as consumer.DeadLetterSuffix names them by default.
const DLQSuffix = consumer.DeadLetterSuffix

// DB is what the tracker needs of Postgres; *pgxpool.Pool satisfies it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Tracker indexes saga events by correlation id and answers which sagas are in flight,
// stuck or completed. Create it with New; it is safe for concurrent use.
type Tracker struct {
	db  DB
	cfg Config
	options

	inst   instruments
	mu     sync.Mutex
	snap   snapshot
	floors retainFloors
}

// options is what the options of New set.
type options struct {
	table     string
	group     string
	now       func() time.Time
	retention time.Duration
	batch     int
	refresh   time.Duration
	log       *slog.Logger
	meter     metric.Meter
	// admit applies the trust rules of WithTrust to a decoded record; nil without them.
	admit consumer.Handler
	// contracts checks payloads against the declared contracts (WithContracts); nil without.
	contracts *checker
}

// Option configures a Tracker. An invalid value makes New return an error wrapping
// [ErrInvalidConfig].
type Option func(*options) error

// WithTable sets the index table's name (default DefaultTable), optionally schema-qualified.
func WithTable(name string) Option {
	return func(t *options) error {
		if err := validTable(name); err != nil {
			return err
		}
		t.table = name
		return nil
	}
}

// WithGroup sets the consumer group Run joins (default DefaultGroup). Use a group of its
// own: the tracker must not share offsets with the services.
func WithGroup(group string) Option {
	return func(t *options) error {
		if group == "" {
			return fmt.Errorf("%w: empty consumer group", ErrInvalidConfig)
		}
		t.group = group
		return nil
	}
}

// WithNow sets the clock the tracker judges expectations and retention by (default time.Now).
func WithNow(now func() time.Time) Option {
	return func(t *options) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidConfig)
		}
		t.now = now
		return nil
	}
}

// WithRetention sets how long indexed events are kept, by event time (default 7 days);
// Retain and Run delete older ones.
func WithRetention(age time.Duration) Option {
	return func(t *options) error {
		if age <= 0 {
			return fmt.Errorf("%w: retention must be positive, got %s", ErrInvalidConfig, age)
		}
		t.retention = age
		return nil
	}
}

// WithRetentionBatch sets how many rows one retention DELETE removes at most (default 1000).
func WithRetentionBatch(n int) Option {
	return func(t *options) error {
		if n <= 0 {
			return fmt.Errorf("%w: retention batch must be positive, got %d", ErrInvalidConfig, n)
		}
		t.batch = n
		return nil
	}
}

// WithRefresh sets how often Run recomputes the in-flight and stuck gauges and applies
// retention (default 15s; retention runs every twentieth of WithRetention's age when
// that is shorter).
func WithRefresh(d time.Duration) Option {
	return func(t *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: refresh interval must be positive, got %s", ErrInvalidConfig, d)
		}
		t.refresh = d
		return nil
	}
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(t *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidConfig)
		}
		t.log = l
		return nil
	}
}

// WithMeter sets the meter of the tracker's metrics (default: the OTel global meter
// provider's meter "github.com/choreo-saga/choreo/tracker").
func WithMeter(m metric.Meter) Option {
	return func(t *options) error {
		if m == nil {
			return fmt.Errorf("%w: nil meter", ErrInvalidConfig)
		}
		t.meter = m
		return nil
	}
}

// New returns a tracker for the sagas of cfg that indexes into db. It validates cfg and
// the options; call Migrate before the first Ingest.
func New(db DB, cfg Config, opts ...Option) (*Tracker, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil database", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Tracker{db: db, cfg: cfg, options: options{
		table: DefaultTable, group: DefaultGroup, now: time.Now,
		retention: 7 * 24 * time.Hour, batch: 1000, refresh: 15 * time.Second,
		log: slog.Default(),
	}}
	for _, o := range opts {
		if err := o(&t.options); err != nil {
			return nil, err
		}
	}
	if err := t.initMetrics(); err != nil {
		return nil, err
	}
	return t, nil
}

// Topics returns the topics Run reads: the configured saga topics and their dead-letter topics.
func (t *Tracker) Topics() []string {
	out := make([]string, 0, 2*len(t.cfg.Topics))
	for _, tp := range t.cfg.Topics {
		out = append(out, tp, tp+DLQSuffix)
	}
	return out
}

// entry is one indexed record.
type entry struct {
	topic                          string
	partition                      int32
	offset                         int64
	corr, id, typ, source, subject string
	at                             time.Time
	traceID, causation             string
	version                        int // ce_dataschemaversion (1 when absent or invalid)
	dead                           bool
	reason, errText                string
	indexed                        time.Time // when it was indexed; set when read back
	escaped                        []string  // the fields storable changed (see toEntry)
}

// header returns the last value of key in r's headers.
func header(r *kgo.Record, key string) string {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return string(r.Headers[i].Value)
		}
	}
	return ""
}

// traceID returns the trace id of a W3C traceparent ("00-<trace>-<span>-<flags>"), or "".
func traceID(tp string) string {
	parts := strings.Split(tp, "-")
	if len(parts) < 4 || len(parts[1]) != 32 || !isHex(parts[1]) || parts[1] == strings.Repeat("0", 32) {
		return ""
	}
	return strings.ToLower(parts[1])
}

// toEntry reads the envelope of r from its headers. A record without a correlation id or
// type is not part of any saga: ok is false. Every text it keeps is storable; the
// names of the fields that had to be escaped or cut are in e.escaped. A record time
// Postgres cannot store (a record timestamp beyond year 9999, without a ce_time) is
// replaced by now and "time" added to e.escaped.
func toEntry(r *kgo.Record, now time.Time) (entry, bool) {
	e := entry{topic: r.Topic, partition: r.Partition, offset: r.Offset,
		traceID: traceID(header(r, "traceparent"))}
	for _, f := range []struct {
		dst    *string
		header string
		max    int
	}{
		{&e.corr, event.HeaderCorrelationID, MaxFieldBytes},
		{&e.id, event.HeaderID, MaxFieldBytes},
		{&e.typ, event.HeaderType, MaxFieldBytes},
		{&e.source, event.HeaderSource, MaxFieldBytes},
		{&e.subject, event.HeaderSubject, MaxFieldBytes},
		{&e.causation, event.HeaderCausationID, MaxFieldBytes},
	} {
		e.set(f.dst, f.header, header(r, f.header), f.max)
	}
	if e.corr == "" || e.typ == "" {
		return e, false
	}
	e.version = 1
	if v, err := strconv.ParseInt(header(r, event.HeaderSchemaVersion), 10, 64); err == nil && v >= 1 {
		if v <= math.MaxInt32 {
			e.version = int(v)
		} else { // past the integer column
			e.escaped = append(e.escaped, event.HeaderSchemaVersion)
		}
	}
	if ts, err := time.Parse(time.RFC3339Nano, header(r, event.HeaderTime)); err == nil {
		e.at = ts.UTC()
	} else {
		e.at = r.Timestamp.UTC()
	}
	if !storableTime(e.at) {
		e.at, e.escaped = now.UTC(), append(e.escaped, "time")
	}
	if strings.HasSuffix(r.Topic, DLQSuffix) || header(r, consumer.HeaderDLQReason) != "" {
		e.dead = true
		e.set(&e.reason, consumer.HeaderDLQReason, header(r, consumer.HeaderDLQReason), MaxFieldBytes)
		e.set(&e.errText, consumer.HeaderDLQError, header(r, consumer.HeaderDLQError), MaxErrorBytes)
	}
	return e, true
}

// set stores the storable form of v, the value of header name, in dst, and notes name
// in e.escaped when that form differs from v.
func (e *entry) set(dst *string, name, v string, max int) {
	var changed bool
	if *dst, changed = storable(v, max); changed {
		e.escaped = append(e.escaped, name)
	}
}

// Ingest indexes records in one INSERT. A record already indexed (same topic, partition
// and offset) is left as it is, so redelivery does not duplicate. Records that carry no
// correlation id or event type are skipped and counted; with WithTrust, records the
// services would refuse are recorded as refused and not indexed. No record makes it fail: a field
// Postgres could not store, or too long for an index, is stored escaped or cut (see
// MaxFieldBytes), and a record whose row Postgres still refuses is skipped; both are
// recorded (Rejected), counted and logged. It returns how many records were newly
// indexed; an error is Postgres failing, and the same records can be ingested again.
func (t *Tracker) Ingest(ctx context.Context, recs ...*kgo.Record) (int, error) {
	now := t.now()
	var (
		entries    []entry
		rejects    []Rejection
		violations []Violation
	)
	for _, r := range recs {
		e, ok := toEntry(r, now)
		if !ok {
			t.inst.skipped.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", "no_saga_headers")))
			continue
		}
		if !e.dead {
			if rej := t.refusal(ctx, r); rej != nil {
				rejects = append(rejects, *rej)
				continue
			}
		}
		if len(e.escaped) > 0 {
			rejects = append(rejects, escapedRejection(e))
		}
		if t.contracts != nil && !e.dead {
			violations = append(violations, t.contracts.check(e, r.Value, now)...)
		}
		entries = append(entries, e)
	}
	if err := t.reject(ctx, rejects); err != nil {
		return 0, err
	}
	if err := t.recordViolations(ctx, violations); err != nil {
		return 0, err
	}
	if len(entries) == 0 {
		return 0, nil
	}
	fresh, stored, skipped, err := t.insertEach(ctx, entries)
	if err != nil {
		return 0, err
	}
	if err := t.reject(ctx, skipped); err != nil {
		return 0, err
	}
	if len(stored) == 0 {
		return 0, nil
	}
	starts, err := t.summarize(ctx, stored)
	if err != nil {
		return 0, err
	}
	t.inst.indexed.Add(ctx, int64(len(fresh)))
	t.recordLatency(ctx, fresh, starts)
	return len(fresh), nil
}

// Run joins the tracker's consumer group on brokers, rebuilds what the tracker derives
// from the index when RebuildNeeded says so (Rebuild), reads Topics and indexes every
// record, committing offsets only after they are indexed; it recomputes the gauges
// every refresh interval and applies retention as often (see WithRefresh). Its client bounds what a record may cost
// (consumer.FetchLimits for event.DefaultMaxPayloadBytes); a batch that decompresses
// past the bound is skipped and recorded (Rejected). opts are added to the client's
// options (e.g. TLS or SASL). It returns when ctx ends (nil) or on a failure of Postgres.
func (t *Tracker) Run(ctx context.Context, brokers []string, opts ...kgo.Opt) error {
	base, err := consumer.FetchLimits(event.DefaultMaxPayloadBytes)
	if err != nil {
		return err
	}
	base = append(base,
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(t.group),
		kgo.ConsumeTopics(t.Topics()...),
		kgo.AutoCommitMarks(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return fmt.Errorf("tracker: kafka client: %w", err)
	}
	defer cl.Close()
	if err := t.rebuildIfNeeded(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	retainEvery := retention.Interval(t.retention, t.refresh)
	nextRefresh, nextRetain := time.Now(), time.Now()
	for {
		if now := time.Now(); now.After(nextRefresh) {
			if err := t.Refresh(ctx); err != nil && ctx.Err() == nil {
				t.log.Warn("tracker: refresh", "error", err)
			}
			nextRefresh = now.Add(t.refresh)
		}
		if now := time.Now(); now.After(nextRetain) {
			if _, err := t.Retain(ctx); err != nil && ctx.Err() == nil {
				t.log.Warn("tracker: retention", "error", err)
			}
			nextRetain = now.Add(retainEvery)
		}
		if err := t.poll(ctx, cl, retainEvery); err != nil {
			if ctx.Err() != nil || errors.Is(err, kgo.ErrClientClosed) {
				return nil
			}
			return err
		}
	}
}

// rebuildIfNeeded calls Rebuild when RebuildNeeded says so.
func (t *Tracker) rebuildIfNeeded(ctx context.Context) error {
	needed, err := t.RebuildNeeded(ctx)
	if err != nil || !needed {
		return err
	}
	t.log.Info("tracker: rebuilding the summaries and the flow from the index", "table", t.table)
	return t.Rebuild(ctx)
}

// poll indexes one poll's records and marks them for commit, skipping the batches that
// decompress past the client's bound, then commits.
func (t *Tracker) poll(ctx context.Context, cl *kgo.Client, wait time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, wait)
	fs := cl.PollRecords(pctx, 1000)
	cancel()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := fs.Err0(); errors.Is(err, kgo.ErrClientClosed) {
		return err
	}
	var tooLarge []*kgo.ErrDecompressTooLarge
	fs.EachError(func(topic string, p int32, err error) {
		if e, ok := errors.AsType[*kgo.ErrDecompressTooLarge](err); ok {
			tooLarge = append(tooLarge, e)
		} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			t.log.Warn("tracker: fetch", "topic", topic, "partition", p, "error", err)
		}
	})
	recs := fs.Records()
	if len(recs) > 0 {
		if _, err := t.Ingest(ctx, recs...); err != nil {
			return err
		}
		cl.MarkCommitRecords(recs...)
	}
	for _, e := range tooLarge {
		if err := t.skipBatch(ctx, cl, e); err != nil {
			return err
		}
	}
	if err := cl.CommitMarkedOffsets(ctx); err != nil && ctx.Err() == nil {
		t.log.Warn("tracker: commit", "error", err)
	}
	return nil
}
