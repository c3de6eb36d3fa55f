package app

import (
	"io"
	"log/slog"

	"github.com/choreo-saga/choreo/tracing"
)

// newLogger returns the logger choreo services use: JSON lines on w at level and above,
// each with "service", and — for records logged with a context (the slog *Context
// methods) — trace_id, span_id, correlation_id and the entity id (tracing.NewLogHandler).
func newLogger(w io.Writer, level slog.Leveler, service string) *slog.Logger {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	return slog.New(tracing.NewLogHandler(h)).With(slog.String("service", service))
}
