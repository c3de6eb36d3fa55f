package consumer

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
)

// Headers DeadLetter adds to a dead-lettered record, after the original headers.
const (
	HeaderDLQReason    = "choreo_dlq_reason"    // one of the Reason constants
	HeaderDLQError     = "choreo_dlq_error"     // the error text, at most MaxDLQErrorBytes
	HeaderDLQAttempts  = "choreo_dlq_attempts"  // attempts made, decimal
	HeaderDLQTopic     = "choreo_dlq_topic"     // original topic
	HeaderDLQPartition = "choreo_dlq_partition" // original partition, decimal
	HeaderDLQOffset    = "choreo_dlq_offset"    // original offset, decimal
	HeaderDLQGroup     = "choreo_dlq_group"     // consumer group that gave up
	HeaderDLQTimestamp = "choreo_dlq_timestamp" // original record timestamp, RFC 3339 (ns)
	HeaderDLQFailedAt  = "choreo_dlq_failed_at" // when it was dead-lettered, RFC 3339 (ns)

	// Headers of a bounded copy, produced when the dead-letter topic refused the whole
	// record for its size; the original is then in the DeadLetterArchive (bounded, see ArchiveValueBytes).
	HeaderDLQTruncated    = "choreo_dlq_truncated"     // "true": key, value or headers are cut
	HeaderDLQOriginalSize = "choreo_dlq_original_size" // the original value's size in bytes, decimal
	HeaderDLQSHA256       = "choreo_dlq_sha256"        // SHA-256 of the original value, lower-case hex
	HeaderDLQArchiveTable = "choreo_dlq_archive_table" // the archive table holding the original
	HeaderDLQArchiveID    = "choreo_dlq_archive_id"    // the original's row id in that table, decimal

	// MaxDLQErrorBytes bounds the HeaderDLQError value.
	MaxDLQErrorBytes = 4096
)

// Reasons, the values of HeaderDLQReason. Reasons lists them all; a new one is added
// there too. The library's and the reference services' Rejects pass one of them
// (ReasonMismatch for a refused cross-check), so that every reason they set is listed.
const (
	ReasonMalformed        = "malformed"         // event.ErrMalformed: undecodable or invalid
	ReasonTooLarge         = "too_large"         // ErrBatchTooLarge: its batch decompresses past the bound
	ReasonUnknownType      = "unknown_type"      // ErrUnknownType
	ReasonUntrusted        = "untrusted"         // ErrUntrusted: wrong source or topic (Router.Trust)
	ReasonBadSignature     = "bad_signature"     // ErrBadSignature: no valid signature (Router.TrustKeys)
	ReasonKeyReused        = "key_reused"        // idempotency.ErrKeyReused
	ReasonMismatch         = "mismatch"          // Reject: the event contradicts what it applies to (a business cross-check)
	ReasonPanic            = "panic"             // ErrPanic
	ReasonRetriesExhausted = "retries_exhausted" // ErrRetriesExhausted
	ReasonPermanent        = "permanent"         // any other non-retryable error
	ReasonFailed           = "failed"            // a retryable error with no Retry in the chain
)

// Reasons of Upcast (upcast.go).
const (
	ReasonUpcastFailed = "upcast_failed"       // ErrUpcast: an upcaster failed
	ReasonUnsupported  = "unsupported_version" // ErrUnsupportedVersion: no upcaster path to a declared version
)

// Reasons returns every Reason constant, in the order they are declared: the values
// HeaderDLQReason takes (tools use it to refuse a reason they do not know).
func Reasons() []string {
	return []string{ReasonMalformed, ReasonTooLarge, ReasonUnknownType, ReasonUntrusted, ReasonBadSignature,
		ReasonKeyReused, ReasonMismatch, ReasonPanic, ReasonRetriesExhausted, ReasonPermanent, ReasonFailed,
		ReasonUpcastFailed, ReasonUnsupported}
}

// Reason classifies err into one of the Reason constants, or returns the reason of a
// Reject error.
func Reason(err error) string {
	if r, ok := rejected(err); ok {
		return r
	}
	switch {
	case errors.Is(err, ErrRetriesExhausted):
		return ReasonRetriesExhausted
	case errors.Is(err, event.ErrMalformed):
		return ReasonMalformed
	case errors.Is(err, ErrUnknownType):
		return ReasonUnknownType
	case errors.Is(err, ErrUntrusted):
		return ReasonUntrusted
	case errors.Is(err, ErrBadSignature):
		return ReasonBadSignature
	case errors.Is(err, idempotency.ErrKeyReused):
		return ReasonKeyReused
	case errors.Is(err, ErrUpcast):
		return ReasonUpcastFailed
	case errors.Is(err, ErrUnsupportedVersion):
		return ReasonUnsupported
	case errors.Is(err, ErrPanic):
		return ReasonPanic
	case !Retryable(err):
		return ReasonPermanent
	default:
		return ReasonFailed
	}
}

// Producer is what DeadLetter needs to publish: a *kgo.Client satisfies it.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// DeadLetterTopic returns the default dead-letter topic of topic: topic +
// DeadLetterSuffix ("orders.events" → "orders.events.dlq"). It is the one place that
// builds the name; WithDeadLetterTopics can name them otherwise.
func DeadLetterTopic(topic string) string { return topic + DeadLetterSuffix }

// deadLetterTopicOf returns the dead-letter topic of source: the one WithDeadLetterTopics
// names, or DeadLetterTopic(source).
func (m *Message) deadLetterTopicOf(source string) string {
	if m.deadLetterTopic != nil {
		return m.deadLetterTopic(source)
	}
	return DeadLetterTopic(source)
}

// Bounds of the other parts of a bounded copy.
const (
	boundedKeyBytes     = 1 << 10  // the key is cut to this
	boundedHeadersBytes = 16 << 10 // original headers are kept, in order, while they fit
)

type deadLetterConfig struct {
	now        func() time.Time
	lookback   time.Duration
	archive    *DeadLetterArchive
	valueBytes int
	logger     *slog.Logger
}

// deadLetterOption configures the dead-letter middleware (newDeadLetter); an invalid
// value is an error wrapping ErrInvalidConfig. StandardConfig sets them.
type deadLetterOption func(*deadLetterConfig) error

// deadLetterArchiveTo makes the middleware settle records the dead-letter topic refuses
// (for their size, or because it does not exist) by writing their original (bounded,
// see ArchiveValueBytes) to the archive a first (StandardConfig.DeadLetterArchive). Default: no archive; such records
// are not settled and the runtime hands them over again, blocking their partition.
func deadLetterArchiveTo(a *DeadLetterArchive) deadLetterOption {
	return func(c *deadLetterConfig) error {
		if a == nil {
			return fmt.Errorf("%w: nil dead-letter archive", ErrInvalidConfig)
		}
		c.archive = a
		return nil
	}
}

// deadLetterValueBytes sets how many leading bytes of the value a bounded copy keeps
// (StandardConfig.DeadLetterValueBytes; default DefaultDeadLetterValueBytes); n must be
// positive.
func deadLetterValueBytes(n int) deadLetterOption {
	return func(c *deadLetterConfig) error {
		if n <= 0 {
			return fmt.Errorf("%w: dead-letter value bytes %d, want > 0", ErrInvalidConfig, n)
		}
		c.valueBytes = n
		return nil
	}
}

// deadLetterLogger sets the logger of the Error lines written when a record could only
// be archived (default slog.Default()).
func deadLetterLogger(l *slog.Logger) deadLetterOption {
	return func(c *deadLetterConfig) error {
		if l == nil {
			return fmt.Errorf("%w: nil dead-letter logger", ErrInvalidConfig)
		}
		c.logger = l
		return nil
	}
}

// DeadLetter settles records that the handlers it wraps fail on: it produces the original
// key, value and headers, plus the HeaderDLQ* headers, to the dead-letter topic, waits for
// the broker's acknowledgement, records OutcomeDeadLettered and returns nil, so the
// runtime commits the offset and the partition moves on. Place it outside Retry, so it
// sees only errors that retrying could not fix. An outage (IsOutage) is returned
// unchanged, never dead-lettered. A failed produce returns an error
// matching ErrDeadLetter (the runtime then hands the record over again); a record given
// up because its worker is stopping is not dead-lettered.
//
// With an archive (StandardConfig.DeadLetterArchive), two refusals cannot block the partition:
//
//   - The copy is refused for its size (kerr.MessageTooLarge, from the broker or from the
//     client before sending; kerr.RecordListTooLarge): DeadLetter writes the
//     original to the archive (bounded: see ArchiveValueBytes) and commits, then produces a bounded copy: the key cut to
//     1 KiB, the original headers that fit in 16 KiB, the first DeadLetterValueBytes of
//     the value, and the HeaderDLQTruncated, HeaderDLQOriginalSize, HeaderDLQSHA256,
//     HeaderDLQArchiveTable and HeaderDLQArchiveID headers besides the usual ones. If
//     even the bounded copy fails, the record is still settled (the archive row is
//     durable) and an Error line is logged.
//   - The dead-letter topic does not exist (kerr.UnknownTopicOrPartition: deleted while
//     running, or never created): the original is archived, the record settled and an
//     Error line names the topic.
//
// The offset is committed only after the archive row or the copy exists: an archive
// write that fails (Postgres unreachable) returns an error matching ErrDeadLetter and
// the record is handed over again.
func DeadLetter(p Producer) Middleware {
	mw, _ := newDeadLetter(p) // no option: no error
	return mw
}

// newDeadLetter returns the DeadLetter middleware configured by opts, applied in order,
// or the first option's error.
func newDeadLetter(p Producer, opts ...deadLetterOption) (Middleware, error) {
	cfg := deadLetterConfig{
		now:        time.Now,
		lookback:   deadLetterLookback,
		valueBytes: DefaultDeadLetterValueBytes,
		logger:     slog.Default(),
	}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			err := next(ctx, m)
			if err == nil || abandoned(ctx, err) || IsOutage(err) {
				return err
			}
			rec := cfg.record(m, err)
			if dup, cerr := cfg.alreadyCopied(ctx, p, m, rec.Topic); cerr != nil {
				return fmt.Errorf("%w: to %s: %w (handling error: %w)", ErrDeadLetter, rec.Topic, cerr, err)
			} else if dup {
				cfg.logger.LogAttrs(ctx, slog.LevelInfo, "consumer: record already dead-lettered by the partition's previous owner; settled without a second copy",
					slog.String("group", m.Group), slog.String("topic", m.Record.Topic), slog.Int("partition", int(m.Record.Partition)),
					slog.Int64("offset", m.Record.Offset), slog.String("dlq_topic", rec.Topic), slog.String("reason", Reason(err)))
				cfg.settled(ctx, m, rec.Topic, err, attribute.Bool("choreo.dlq.copy_exists", true))
				m.Outcome = OutcomeDuplicate // counted once, by the owner that wrote the copy
				return nil
			}
			if perr := p.ProduceSync(ctx, rec).FirstErr(); perr != nil {
				return cfg.refused(ctx, p, m, rec, err, perr)
			}
			cfg.settled(ctx, m, rec.Topic, err)
			return nil
		}
	}, nil
}

func (c deadLetterConfig) record(m *Message, err error) *kgo.Record {
	src := m.Record
	attempts := max(m.Attempt, 1)
	headers := make([]kgo.RecordHeader, 0, len(src.Headers)+9)
	headers = append(headers, src.Headers...)
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderDLQReason, Value: []byte(Reason(err))},
		kgo.RecordHeader{Key: HeaderDLQError, Value: []byte(clipError(err))},
		kgo.RecordHeader{Key: HeaderDLQAttempts, Value: []byte(strconv.Itoa(attempts))},
		kgo.RecordHeader{Key: HeaderDLQTopic, Value: []byte(src.Topic)},
		kgo.RecordHeader{Key: HeaderDLQPartition, Value: []byte(strconv.Itoa(int(src.Partition)))},
		kgo.RecordHeader{Key: HeaderDLQOffset, Value: []byte(strconv.FormatInt(src.Offset, 10))},
		kgo.RecordHeader{Key: HeaderDLQGroup, Value: []byte(m.Group)},
		kgo.RecordHeader{Key: HeaderDLQTimestamp, Value: []byte(src.Timestamp.UTC().Format(time.RFC3339Nano))},
		kgo.RecordHeader{Key: HeaderDLQFailedAt, Value: []byte(c.now().UTC().Format(time.RFC3339Nano))},
	)
	return &kgo.Record{
		Topic:   m.deadLetterTopicOf(m.Topic()),
		Key:     src.Key,
		Value:   src.Value,
		Headers: headers,
	}
}

// settled records that m was dead-lettered to topic because of err.
func (c deadLetterConfig) settled(ctx context.Context, m *Message, topic string, err error, attrs ...attribute.KeyValue) {
	m.Outcome, m.DeadLetterCause = OutcomeDeadLettered, err
	trace.SpanFromContext(ctx).AddEvent("dead-lettered", trace.WithAttributes(append([]attribute.KeyValue{
		attribute.String("choreo.dlq.topic", topic),
		attribute.String("choreo.dlq.reason", Reason(err)),
		attribute.String("choreo.dlq.error", clipError(err)),
	}, attrs...)...))
}

// refused handles a dead-letter copy rec of m that could not be produced (perr; err is
// the handling error). A refusal for size, or a missing dead-letter topic, is settled
// through the archive when there is one; anything else is returned, unsettled.
func (c deadLetterConfig) refused(ctx context.Context, p Producer, m *Message, rec *kgo.Record, err, perr error) error {
	tooLarge := errors.Is(perr, kerr.MessageTooLarge) || errors.Is(perr, kerr.RecordListTooLarge)
	missing := errors.Is(perr, kerr.UnknownTopicOrPartition) || errors.Is(perr, kerr.UnknownTopicID)
	if c.archive == nil || !tooLarge && !missing || ctx.Err() != nil {
		return fmt.Errorf("%w: to %s: %w (handling error: %w)", ErrDeadLetter, rec.Topic, perr, err)
	}
	a, aerr := c.archive.put(ctx, m, rec.Topic, err, perr)
	if aerr != nil {
		// perr only as text: the archive's error decides how the failure is classified
		// (Postgres unreachable is an outage; see the consumer's outage handling).
		return fmt.Errorf("%w: to %s: %v; archiving the original failed: %w (handling error: %w)",
			ErrDeadLetter, rec.Topic, perr, aerr, err)
	}
	archivedAttrs := []attribute.KeyValue{
		attribute.String("choreo.dlq.archive_table", c.archive.name),
		attribute.Int64("choreo.dlq.archive_id", a.id),
	}
	logAttrs := []slog.Attr{
		slog.String("group", m.Group),
		slog.String("topic", m.Record.Topic),
		slog.Int("partition", int(m.Record.Partition)),
		slog.Int64("offset", m.Record.Offset),
		slog.String("dlq_topic", rec.Topic),
		slog.String("archive_table", c.archive.name),
		slog.Int64("archive_id", a.id),
		slog.String("reason", Reason(err)),
		slog.Any("dlq_error", perr),
	}
	if missing {
		c.logger.LogAttrs(ctx, slog.LevelError, "consumer: dead-letter topic missing; record archived and settled without a dead-letter copy", logAttrs...)
		c.settled(ctx, m, rec.Topic, err, archivedAttrs...)
		return nil
	}
	b := c.bounded(m, rec, a)
	if berr := p.ProduceSync(ctx, b).FirstErr(); berr != nil {
		c.logger.LogAttrs(ctx, slog.LevelError, "consumer: bounded dead-letter copy failed; record archived and settled without a dead-letter copy",
			append(logAttrs, slog.Any("copy_error", berr))...)
	}
	c.settled(ctx, m, rec.Topic, err, append(archivedAttrs, attribute.Bool("choreo.dlq.truncated", true))...)
	return nil
}

// bounded returns a copy of the dead letter rec of m whose size is bounded whatever the
// original's: see DeadLetter.
func (c deadLetterConfig) bounded(m *Message, rec *kgo.Record, a archived) *kgo.Record {
	src := m.Record
	out := &kgo.Record{Topic: rec.Topic, Key: clip(src.Key, boundedKeyBytes), Value: clip(src.Value, c.valueBytes)}
	budget := boundedHeadersBytes
	for _, h := range src.Headers {
		if budget -= len(h.Key) + len(h.Value); budget < 0 {
			break
		}
		out.Headers = append(out.Headers, h)
	}
	// rec's headers after the originals are DeadLetter's own.
	out.Headers = append(out.Headers, rec.Headers[len(src.Headers):]...)
	out.Headers = append(out.Headers,
		kgo.RecordHeader{Key: HeaderDLQTruncated, Value: []byte("true")},
		kgo.RecordHeader{Key: HeaderDLQOriginalSize, Value: []byte(strconv.Itoa(len(src.Value)))},
		kgo.RecordHeader{Key: HeaderDLQSHA256, Value: []byte(hex.EncodeToString(a.sha256[:]))},
		kgo.RecordHeader{Key: HeaderDLQArchiveTable, Value: []byte(c.archive.name)},
		kgo.RecordHeader{Key: HeaderDLQArchiveID, Value: []byte(strconv.FormatInt(a.id, 10))},
	)
	return out
}

func clip(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

func clipError(err error) string {
	s := err.Error()
	if len(s) > MaxDLQErrorBytes {
		s = s[:MaxDLQErrorBytes]
	}
	return s
}
