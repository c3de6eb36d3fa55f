package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/tracker"
)

// retention is the tracker's default retention (WithRetention), which the prefilled
// events are spread over.
const retention = 7 * 24 * time.Hour

// onPrefilled fills a fresh index with about c.prefill events (prefill), times the
// console's queries on it, then indexes the n events on brokers on top of it with the
// contract check on, and compares that rate with the checked runs on empty indexes
// (both from the first indexed event on; the table reports the start-up apart: the
// prefill records the declarations the index is built for, so Run does not rebuild it).
func onPrefilled(ctx context.Context, c config, cfg tracker.Config, brokers []string, n int, empty []ingested, catalogue contract.Catalogue) (*prefilledResult, error) {
	dsn, drop, err := benchutil.CreateDB(ctx, c.pg, "choreo_bench_tracker")
	if err != nil {
		return nil, err
	}
	defer drop() //nolint:errcheck
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if err := tracker.Migrate(ctx, pool, ""); err != nil {
		return nil, err
	}
	p, err := prefill(ctx, pool, cfg, c.prefill, c.partitions, time.Now(), retention)
	if err != nil {
		return nil, err
	}
	fmt.Printf("\nprefilled an index with %d events of %d order sagas (%d stuck, %d in flight) in %s\n",
		p.events, p.sagas, p.stuck, p.inFlight, p.took.Round(time.Second))
	tr, err := tracker.New(pool, cfg)
	if err != nil {
		return nil, err
	}
	defer tr.Close() //nolint:errcheck
	qs, err := timeQueries(ctx, pool, tr, c.queryRuns)
	if err != nil {
		return nil, err
	}
	got, err := ingestInto(ctx, pool, cfg, brokers, n, "bench-prefilled", []tracker.Option{tracker.WithContracts(catalogue)})
	if err != nil {
		return nil, err
	}
	r := &prefilledResult{Events: p.events, Sagas: p.sagas, Stuck: p.stuck, InFlight: p.inFlight,
		PrefillSeconds: p.took.Seconds(), Queries: qs, StartupSeconds: got.first.Seconds(), IngestPerSec: got.afterStartup(n)}
	for _, e := range empty {
		r.EmptyPerSec = max(r.EmptyPerSec, e.afterStartup(n))
	}
	r.OverEmpty = r.IngestPerSec / r.EmptyPerSec
	return r, nil
}

// printPrefilled adds the prefilled index's rows to the table.
func printPrefilled(r prefilledResult, sagaRate float64) {
	for _, q := range r.Queries {
		fmt.Printf("| %s on %d events: %s, p50 / p99 of %d (last: %d rows) | %.1f / **%.1f** ms | ≤ %.0f ms at p99 | %.2f |\n",
			q.Name, r.Events, q.Call, q.Runs, q.Rows, q.P50ms, q.P99ms, q.LimitMs, q.Ratio)
	}
	fmt.Printf("| tracker ingest on top of them, contract check on, after a start-up of %.1f s (no rebuild of its %d summaries: the declarations are unchanged) | %.0f events/s | the saga at saturation: %.0f events/s | %.1f× |\n",
		r.StartupSeconds, r.Sagas, r.IngestPerSec, sagaRate, r.PrefilledOverSaga)
	fmt.Printf("| the same, prefilled ÷ empty (the faster checked run; both after start-up, on the same server) | %.0f events/s | %.0f events/s | %.2f |\n",
		r.IngestPerSec, r.EmptyPerSec, r.OverEmpty)
	for _, q := range r.Queries {
		if q.Ratio > 1 {
			fmt.Printf("\n%s over the %.0f ms limit at p99\n", q.Name, q.LimitMs)
		}
	}
}
