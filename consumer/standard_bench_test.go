package consumer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// BenchmarkStandardOneEvent measures the standard chain handling one event per
// transaction on real Redis and Postgres: lease, fence, claim, one UPDATE and one outbox
// row, commit, release. Its allocations per op are the chain's, pgx's and go-redis's per
// event. Run it alone: it measures round trips on whatever else the machine runs.
func BenchmarkStandardOneEvent(b *testing.B) {
	ctx := context.Background()
	pool := testenv.Postgres(b)
	migrateTestDB(b, pool)
	ob := migratedOutbox(b, pool)
	rdb, ns := testenv.Redis(b)
	const entities = 64
	if _, err := pool.Exec(ctx, `INSERT INTO entities (key, seq) SELECT 'e' || i, 0 FROM generate_series(0, $1 - 1) AS i`, entities); err != nil {
		b.Fatal(err)
	}
	cfg := StandardConfig{
		DB: pool, DeadLetter: new(kgo.Client), Locker: newLocker(b, rdb, lock.WithNamespace(ns)), Fence: true,
		Name: "bench", AfterCommit: []func(){ob.Wake}, Retry: RetryConfig{MaxAttempts: 1},
		TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Handler: func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			if _, err := tx.Exec(ctx, `UPDATE entities SET seq = seq + 1 WHERE key = $1`, ev.Subject); err != nil {
				return err
			}
			return ob.Enqueue(ctx, tx, "out", ev)
		},
	}
	h, err := Standard(cfg)
	if err != nil {
		b.Fatal(err)
	}
	warm := 2 * entities
	recs := make([]*kgo.Record, warm+b.N)
	for i := range recs {
		recs[i] = eventRecord(b, "in", "test.step", fmt.Sprintf("e%d", i%entities), seqPayload{Seq: i})
	}
	// Warm up the connections' statement caches, then count the CPU that this process,
	// and the database's backends spend per event: unlike the time per op, it does not
	// depend much on what else the machine runs (commit flushes, scheduling). The Redis
	// server is shared, so its CPU is not counted.
	for i := range warm {
		if err := h(ctx, &Message{Record: recs[b.N+i], Group: "g"}); err != nil {
			b.Fatal(err)
		}
	}
	cpu := startCPU(ctx, pool)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := h(ctx, &Message{Record: recs[i], Group: "g"}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu.report(b)
	if err := cfg.Locker.(*lock.Locker).Wait(ctx); err != nil {
		b.Fatal(err)
	}
}
