package consumer

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/tracing"
)

// BenchmarkChainOverhead measures the CPU cost of the standard chain's in-process
// middlewares (Recover, Tracing, CorrelationID, Metrics, Logging, DeadLetter, Retry,
// Recover, Decode, Router.Filter) around a handler that does nothing: what the chain adds
// to an event besides its Redis and Postgres round trips. Telemetry is no-op, as with
// exporters disabled.
func BenchmarkChainOverhead(b *testing.B) {
	rec := eventRecord(b, "orders", "order.created", "o-1", map[string]int{"amount": 42})
	router := NewRouter().Handle("order.created", func(context.Context, pgx.Tx, event.Event) error { return nil })
	metrics, err := measure(metricnoop.NewMeterProvider())
	if err != nil {
		b.Fatal(err)
	}
	h := wrap(func(ctx context.Context, m *Message) error { return router.Route(ctx, nil, m.Event) },
		recoverPanics(),
		traceRecord(tracing.WithTracerProvider(tracenoop.NewTracerProvider())),
		correlate("order.id"),
		metrics,
		logOutcome(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))),
		DeadLetter(nil),
		retryInPlace(RetryConfig{}),
		recoverPanics(),
		decodeRecord(),
		router.Filter(),
	)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := h(ctx, &Message{Record: rec, Group: "payment"}); err != nil {
			b.Fatal(err)
		}
	}
}
