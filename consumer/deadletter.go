package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

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

	// MaxDLQErrorBytes bounds the HeaderDLQError value.
	MaxDLQErrorBytes = 4096
)

// Reasons, the values of HeaderDLQReason.
const (
	ReasonMalformed        = "malformed"         // event.ErrMalformed: undecodable or invalid
	ReasonUnknownType      = "unknown_type"      // ErrUnknownType
	ReasonUntrusted        = "untrusted"         // ErrUntrusted: wrong source or topic (Router.Trust)
	ReasonKeyReused        = "key_reused"        // idempotency.ErrKeyReused
	ReasonPanic            = "panic"             // ErrPanic
	ReasonRetriesExhausted = "retries_exhausted" // ErrRetriesExhausted
	ReasonPermanent        = "permanent"         // any other non-retryable error
	ReasonFailed           = "failed"            // a retryable error with no Retry in the chain
)

// Reason classifies err into one of the Reason constants.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrRetriesExhausted):
		return ReasonRetriesExhausted
	case errors.Is(err, event.ErrMalformed):
		return ReasonMalformed
	case errors.Is(err, ErrUnknownType):
		return ReasonUnknownType
	case errors.Is(err, ErrUntrusted):
		return ReasonUntrusted
	case errors.Is(err, idempotency.ErrKeyReused):
		return ReasonKeyReused
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

type deadLetterConfig struct {
	topic func(source string) string
	now   func() time.Time
}

// DeadLetterOption configures DeadLetter.
type DeadLetterOption func(*deadLetterConfig)

// DeadLetterTopic names the dead-letter topic of each source topic (default: source +
// ".dlq"). The topic must exist unless the producer may auto-create topics.
func DeadLetterTopic(name func(source string) string) DeadLetterOption {
	return func(c *deadLetterConfig) {
		if name != nil {
			c.topic = name
		}
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
func DeadLetter(p Producer, opts ...DeadLetterOption) Middleware {
	cfg := deadLetterConfig{
		topic: func(source string) string { return source + ".dlq" },
		now:   time.Now,
	}
	for _, o := range opts {
		o(&cfg)
	}
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			err := next(ctx, m)
			if err == nil || abandoned(ctx, err) || IsOutage(err) {
				return err
			}
			rec := cfg.record(m, err)
			if perr := p.ProduceSync(ctx, rec).FirstErr(); perr != nil {
				return fmt.Errorf("%w: to %s: %w (handling error: %w)", ErrDeadLetter, rec.Topic, perr, err)
			}
			m.Outcome, m.DeadLetterCause = OutcomeDeadLettered, err
			trace.SpanFromContext(ctx).AddEvent("dead-lettered", trace.WithAttributes(
				attribute.String("choreo.dlq.topic", rec.Topic),
				attribute.String("choreo.dlq.reason", Reason(err)),
				attribute.String("choreo.dlq.error", clipError(err)),
			))
			return nil
		}
	}
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
		Topic:   c.topic(src.Topic),
		Key:     src.Key,
		Value:   src.Value,
		Headers: headers,
	}
}

func clipError(err error) string {
	s := err.Error()
	if len(s) > MaxDLQErrorBytes {
		s = s[:MaxDLQErrorBytes]
	}
	return s
}
