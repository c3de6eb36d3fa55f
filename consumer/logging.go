package consumer

import (
	"context"
	"log/slog"
	"time"

	"github.com/choreo-saga/choreo/tracing"
)

// logOutcome logs one line per handled record: at Debug when it was handled, a duplicate or
// ignored, at Warn when it was dead-lettered and at Error when the handler failed (at
// Debug when it failed with an outage, which the runtime logs once per partition). Each
// line carries the group, topic, partition, offset, key, event type (and, for an event
// Upcast brought to another schema version, upcast_from and schema_version), outcome, attempts,
// duration, the saga's correlation id (from the context; see Correlate) and the
// error. A nil logger means slog.Default().
func logOutcome(l *slog.Logger) Middleware {
	if l == nil {
		l = slog.Default()
	}
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			start := time.Now()
			err := next(ctx, m)
			logRecord(ctx, l, m, err, time.Since(start))
			return err
		}
	}
}

// logRecord writes m's log line. Logging and StandardBatch both call it.
func logRecord(ctx context.Context, l *slog.Logger, m *Message, err error, elapsed time.Duration) {
	outcome := m.outcome(err)
	level := slog.LevelDebug
	switch outcome {
	case OutcomeDeadLettered:
		level = slog.LevelWarn
	case OutcomeFailed:
		if !IsOutage(err) { // the runtime logs an outage once per partition
			level = slog.LevelError
		}
	}
	if !l.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("group", m.Group),
		slog.String("topic", m.Record.Topic),
		slog.Int("partition", int(m.Record.Partition)),
		slog.Int64("offset", m.Record.Offset),
		slog.String("key", string(m.Record.Key)),
		slog.String("outcome", string(outcome)),
		slog.Int("attempts", max(m.Attempt, 1)),
		slog.Duration("duration", elapsed),
	}
	if m.Decoded {
		attrs = append(attrs, slog.String("event_type", m.Event.Type), slog.String("event_id", m.Event.ID))
		if m.upcastFrom != 0 {
			attrs = append(attrs, slog.Int("upcast_from", m.upcastFrom), slog.Int("schema_version", m.Event.SchemaVersion))
		}
	}
	if id := tracing.CorrelationID(ctx); id != "" {
		attrs = append(attrs, slog.String("correlation_id", id))
	}
	if err != nil {
		attrs = append(attrs, slog.Any("error", err))
	} else if m.DeadLetterCause != nil {
		attrs = append(attrs, slog.String("reason", Reason(m.DeadLetterCause)), slog.Any("error", m.DeadLetterCause))
	}
	l.LogAttrs(ctx, level, "consumer: record "+string(outcome), attrs...)
}
