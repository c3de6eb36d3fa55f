package tracker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
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
	db        DB
	cfg       Config
	table     string
	group     string
	now       func() time.Time
	retention time.Duration
	batch     int
	refresh   time.Duration
	log       *slog.Logger
	meter     metric.Meter

	inst instruments
	mu   sync.Mutex
	snap snapshot
}

// Option configures a Tracker.
type Option func(*Tracker) error

// WithTable sets the index table's name (default DefaultTable), optionally schema-qualified.
func WithTable(name string) Option {
	return func(t *Tracker) error {
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
	return func(t *Tracker) error {
		if group == "" {
			return fmt.Errorf("%w: empty consumer group", ErrInvalidConfig)
		}
		t.group = group
		return nil
	}
}

// WithNow sets the clock the tracker judges expectations and retention by (default time.Now).
func WithNow(now func() time.Time) Option {
	return func(t *Tracker) error {
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
	return func(t *Tracker) error {
		if age <= 0 {
			return fmt.Errorf("%w: retention must be positive, got %s", ErrInvalidConfig, age)
		}
		t.retention = age
		return nil
	}
}

// WithRetentionBatch sets how many rows one retention DELETE removes at most (default 1000).
func WithRetentionBatch(n int) Option {
	return func(t *Tracker) error {
		if n <= 0 {
			return fmt.Errorf("%w: retention batch must be positive, got %d", ErrInvalidConfig, n)
		}
		t.batch = n
		return nil
	}
}

// WithRefresh sets how often Run recomputes the in-flight and stuck gauges and applies
// retention (default 15s).
func WithRefresh(d time.Duration) Option {
	return func(t *Tracker) error {
		if d <= 0 {
			return fmt.Errorf("%w: refresh interval must be positive, got %s", ErrInvalidConfig, d)
		}
		t.refresh = d
		return nil
	}
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(t *Tracker) error {
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
	return func(t *Tracker) error {
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
	t := &Tracker{
		db: db, cfg: cfg, table: DefaultTable, group: DefaultGroup, now: time.Now,
		retention: 7 * 24 * time.Hour, batch: 1000, refresh: 15 * time.Second,
		log: slog.Default(),
	}
	for _, o := range opts {
		if err := o(t); err != nil {
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
	if len(parts) < 4 || len(parts[1]) != 32 || parts[1] == strings.Repeat("0", 32) {
		return ""
	}
	return strings.ToLower(parts[1])
}

// toEntry reads the envelope of r from its headers. A record without a correlation id or
// type is not part of any saga: ok is false.
func toEntry(r *kgo.Record) (entry, bool) {
	e := entry{
		topic: r.Topic, partition: r.Partition, offset: r.Offset,
		corr: header(r, event.HeaderCorrelationID), id: header(r, event.HeaderID),
		typ: header(r, event.HeaderType), source: header(r, event.HeaderSource),
		subject: header(r, event.HeaderSubject), traceID: traceID(header(r, "traceparent")),
		causation: header(r, event.HeaderCausationID),
	}
	if e.corr == "" || e.typ == "" {
		return e, false
	}
	e.version = 1
	if v, err := strconv.Atoi(header(r, event.HeaderSchemaVersion)); err == nil && v >= 1 {
		e.version = v
	}
	if ts, err := time.Parse(time.RFC3339Nano, header(r, event.HeaderTime)); err == nil {
		e.at = ts.UTC()
	} else {
		e.at = r.Timestamp.UTC()
	}
	if strings.HasSuffix(r.Topic, DLQSuffix) || header(r, consumer.HeaderDLQReason) != "" {
		e.dead = true
		e.reason = header(r, consumer.HeaderDLQReason)
		e.errText = header(r, consumer.HeaderDLQError)
	}
	return e, true
}

// Ingest indexes records in one INSERT. A record already indexed (same topic, partition
// and offset) is left as it is, so redelivery does not duplicate. Records that carry no
// correlation id or event type are skipped and counted. It returns how many records were
// newly indexed.
func (t *Tracker) Ingest(ctx context.Context, recs ...*kgo.Record) (int, error) {
	var entries []entry
	for _, r := range recs {
		e, ok := toEntry(r)
		if !ok {
			t.inst.skipped.Add(ctx, 1)
			continue
		}
		entries = append(entries, e)
	}
	if len(entries) == 0 {
		return 0, nil
	}
	fresh, err := t.insert(ctx, entries)
	if err != nil {
		return 0, err
	}
	starts, err := t.summarize(ctx, entries)
	if err != nil {
		return 0, err
	}
	t.inst.indexed.Add(ctx, int64(len(fresh)))
	t.recordLatency(ctx, fresh, starts)
	return len(fresh), nil
}

// Run joins the tracker's consumer group on brokers, reads Topics and indexes every
// record, committing offsets only after they are indexed; it recomputes the gauges and
// applies retention every refresh interval. opts are added to the client's options
// (e.g. TLS or SASL). It returns when ctx ends (nil) or on a failure.
func (t *Tracker) Run(ctx context.Context, brokers []string, opts ...kgo.Opt) error {
	base := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(t.group),
		kgo.ConsumeTopics(t.Topics()...),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return fmt.Errorf("tracker: kafka client: %w", err)
	}
	defer cl.Close()
	if err := t.Rebuild(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	next := time.Now()
	for {
		if time.Now().After(next) {
			if err := t.Refresh(ctx); err != nil && ctx.Err() == nil {
				t.log.Warn("tracker: refresh", "error", err)
			}
			if _, err := t.Retain(ctx); err != nil && ctx.Err() == nil {
				t.log.Warn("tracker: retention", "error", err)
			}
			next = time.Now().Add(t.refresh)
		}
		pctx, cancel := context.WithTimeout(ctx, t.refresh)
		fs := cl.PollRecords(pctx, 1000)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(fs.Err0(), kgo.ErrClientClosed) {
			return nil
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.log.Warn("tracker: fetch", "topic", topic, "partition", p, "error", err)
			}
		})
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		if _, err := t.Ingest(ctx, recs...); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := cl.CommitRecords(ctx, recs...); err != nil && ctx.Err() == nil {
			t.log.Warn("tracker: commit", "error", err)
		}
	}
}

// Retain deletes indexed events older than the retention age, and the summaries of sagas
// whose every record is older, in batches of at most the retention batch size. It returns
// how many events it deleted.
func (t *Tracker) Retain(ctx context.Context) (int64, error) {
	cutoff := t.now().Add(-t.retention)
	total, err := t.deleteBatches(ctx, t.table, "event_time", cutoff)
	if err != nil {
		return total, err
	}
	_, err = t.deleteBatches(ctx, t.sagasTable(), "last_at", cutoff)
	return total, err
}

// deleteBatches deletes the rows of table whose column is before cutoff, batch by batch.
func (t *Tracker) deleteBatches(ctx context.Context, table, column string, cutoff time.Time) (int64, error) {
	q := `DELETE FROM ` + table + ` WHERE ctid IN (SELECT ctid FROM ` + table +
		` WHERE ` + column + ` < $1 LIMIT $2)`
	var total int64
	for {
		tag, err := t.db.Exec(ctx, q, cutoff, t.batch)
		if err != nil {
			return total, fmt.Errorf("tracker: retention of %s: %w", table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(t.batch) {
			return total, nil
		}
	}
}
