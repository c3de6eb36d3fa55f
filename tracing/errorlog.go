package tracing

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// errorLogInterval is how often [Setup]'s OpenTelemetry error handler logs
// one distinct error message; repeats in between are counted and reported
// with the next line for that message.
const errorLogInterval = time.Minute

// maxErrorKeys bounds the memory of distinct messages; past it the memory
// starts afresh.
const maxErrorKeys = 64

// WithLogger sets the logger for OpenTelemetry's internal errors (an
// unreachable collector, a rejected export, an invalid instrument), which
// [Setup] installs with otel.SetErrorHandler together with the other globals.
// Each distinct message is logged at Warn at most once a minute, with the number of repeats suppressed since, so a
// collector outage costs one line a minute rather than one per batch.
// Default: slog.Default() at the time of each error.
func WithLogger(l *slog.Logger) Option {
	return func(c *setupConfig) error { c.errorLogger = l; return nil }
}

// errorLog is an otel.ErrorHandler that rate-limits by message.
type errorLog struct {
	logger *slog.Logger // nil: slog.Default()
	every  time.Duration
	now    func() time.Time

	mu   sync.Mutex
	seen map[string]*errorSeen
}

type errorSeen struct {
	logged     time.Time
	suppressed int
}

func newErrorLog(l *slog.Logger) *errorLog {
	return &errorLog{logger: l, every: errorLogInterval, now: time.Now, seen: make(map[string]*errorSeen)}
}

// Handle implements otel.ErrorHandler.
func (e *errorLog) Handle(err error) {
	if err == nil {
		return
	}
	msg := err.Error()
	now := e.now()
	e.mu.Lock()
	s, ok := e.seen[msg]
	if ok && now.Sub(s.logged) < e.every {
		s.suppressed++
		e.mu.Unlock()
		return
	}
	suppressed := 0
	if ok {
		suppressed = s.suppressed
	} else {
		if len(e.seen) >= maxErrorKeys {
			clear(e.seen)
		}
		s = &errorSeen{}
		e.seen[msg] = s
	}
	s.logged, s.suppressed = now, 0
	e.mu.Unlock()

	l := e.logger
	if l == nil {
		l = slog.Default()
	}
	attrs := []slog.Attr{slog.String("error", msg)}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("repeated", suppressed))
	}
	l.LogAttrs(context.Background(), slog.LevelWarn, "opentelemetry error", attrs...)
}
