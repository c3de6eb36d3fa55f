package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/tracker"
)

// The bounds sagactl console puts on its tracker queries (cmd/sagactl: consoleStuckSagas,
// consoleSagaList, consoleFlowWindow).
const (
	consoleStuckSagas = 50
	consoleSagaList   = 200
	consoleFlowWindow = time.Hour
)

// queryLimit is the p99 each console query must stay within.
const queryLimit = 50 * time.Millisecond

// queryTimes is one console query's latencies over runs.
type queryTimes struct {
	Name    string  `json:"name"`
	Call    string  `json:"call"`
	Runs    int     `json:"runs"`
	Rows    int     `json:"rows"` // what its last run returned: sagas, events or flow edges
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
	LimitMs float64 `json:"limit_ms"`
	Ratio   float64 `json:"p99_over_limit"`
}

// consoleQuery is a query the console sends the tracker, as sagactl console calls it.
type consoleQuery struct {
	name, call string
	run        func(ctx context.Context, id string) (int, error) // rows it returned
}

// consoleQueries are the tracker calls behind the console's pages: the overview's stuck
// list and saga counts, the sagas page, a saga's page (id) and the flow page.
func consoleQueries(tr *tracker.Tracker) []consoleQuery {
	return []consoleQuery{
		{"stuck list (overview)", fmt.Sprintf("Find(stuck, limit %d)", consoleStuckSagas), func(ctx context.Context, _ string) (int, error) {
			s, err := tr.Find(ctx, tracker.Filter{Status: tracker.StatusStuck, Limit: consoleStuckSagas})
			return len(s), err
		}},
		{"saga page (a random saga each time)", "Saga(id)", func(ctx context.Context, id string) (int, error) {
			tl, err := tr.Saga(ctx, id)
			return len(tl.Events) + len(tl.DeadLetters), err
		}},
		{"flow page", fmt.Sprintf("FlowRecent(%s)", consoleFlowWindow), func(ctx context.Context, _ string) (int, error) {
			f, err := tr.FlowRecent(ctx, consoleFlowWindow)
			return len(f.Edges), err
		}},
		{"sagas page list", fmt.Sprintf("Find(all, limit %d)", consoleSagaList), func(ctx context.Context, _ string) (int, error) {
			s, err := tr.Find(ctx, tracker.Filter{Limit: consoleSagaList})
			return len(s), err
		}},
		{"saga counts (overview, sagas page)", "Counts()", func(ctx context.Context, _ string) (int, error) {
			c, err := tr.Counts(ctx)
			return len(c), err
		}},
	}
}

// timeQueries runs each console query runs times, in turn (one of each per round, so
// that all see the same state of the caches), after one unmeasured round; the saga
// page asks for a different saga each time, drawn at random from the summaries.
func timeQueries(ctx context.Context, pool *pgxpool.Pool, tr *tracker.Tracker, runs int) ([]queryTimes, error) {
	rows, err := pool.Query(ctx, `SELECT correlation_id FROM `+tracker.DefaultTable+`_sagas ORDER BY random() LIMIT $1`, runs+1)
	if err != nil {
		return nil, err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no saga indexed")
	}
	qs := consoleQueries(tr)
	lat := make([][]time.Duration, len(qs))
	out := make([]queryTimes, len(qs))
	for round := range runs + 1 {
		id := ids[round%len(ids)]
		for i, q := range qs {
			start := time.Now()
			n, err := q.run(ctx, id)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", q.call, err)
			}
			if round > 0 {
				lat[i] = append(lat[i], time.Since(start))
			}
			out[i].Rows = n
		}
	}
	for i, q := range qs {
		slices.Sort(lat[i])
		p50, p99 := benchutil.Percentile(lat[i], 0.50), benchutil.Percentile(lat[i], 0.99)
		out[i] = queryTimes{Name: q.name, Call: q.call, Runs: runs, Rows: out[i].Rows, P50ms: ms(p50), P99ms: ms(p99),
			LimitMs: ms(queryLimit), Ratio: float64(p99) / float64(queryLimit)}
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
