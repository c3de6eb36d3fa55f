package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

// A small prefill writes the planned sagas of every kind, their records and summaries as
// the tracker computes them (its own Rebuild writes the same summaries, flow rows, flow
// tallies and fingerprint, so Run would not rebuild), with the secondary indexes
// back; the console's queries find the stuck sagas by deadline, each saga's events
// chained by causation, and the flow of the reference saga; timeQueries runs them all.
func TestPrefill(t *testing.T) {
	ctx := context.Background()
	pool := testenv.PostgresNamed(t, "prefill")
	if err := tracker.Migrate(ctx, pool, ""); err != nil {
		t.Fatal(err)
	}
	cfg, err := tracker.LoadConfig("../../deploy/tracker/order.json")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	const n = 20_000
	p, err := prefill(ctx, pool, cfg, n, 6, now, retention)
	if err != nil {
		t.Fatal(err)
	}

	// The kinds as the SQL assigns them: the last inFlight sagas in flight, the others by
	// (g × 389) mod 1000 against the kinds' shares.
	sagas, inFlight := prefillPlan(n)
	var events, stuck int64
	for g := 1; g <= sagas; g++ {
		var k sagaKind
		if g > sagas-inFlight {
			k = sagaKinds[len(sagaKinds)-3+g%3]
		} else {
			r, lo := (g*389)%1000, 0
			for _, c := range sagaKinds {
				if r >= lo && r < lo+c.per1000 {
					k = c
				}
				lo += c.per1000
			}
		}
		events += int64(k.records())
		if k.waiting != "" && !k.inFlight {
			stuck++
		}
	}
	if p.events != events || p.sagas != int64(sagas) || p.stuck != stuck || p.inFlight != int64(inFlight) {
		t.Fatalf("prefilled %+v, want %d events, %d sagas, %d stuck, %d in flight", p, events, sagas, stuck, inFlight)
	}
	if p.events < n*99/100 || p.events > n*101/100 || p.stuck < int64(sagas)/120 || p.stuck > int64(sagas)/80 {
		t.Errorf("prefilled %+v: want about %d events, about 1%% of the sagas stuck", p, n)
	}
	var indexes []string
	if err := pool.QueryRow(ctx, `SELECT array_agg(indexname ORDER BY indexname) FROM pg_indexes WHERE tablename LIKE 'choreo_tracker_events%'`).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"choreo_tracker_events_corr", "choreo_tracker_events_time", "choreo_tracker_events_sagas_deadline",
		"choreo_tracker_events_sagas_started", "choreo_tracker_events_sagas_last", "choreo_tracker_events_pkey",
		"choreo_tracker_events_flow_events_time"} {
		if !slices.Contains(indexes, want) {
			t.Errorf("index %s missing after the prefill: %v", want, indexes)
		}
	}

	// The summaries, types and versions are what the tracker computes from the events.
	tr, err := tracker.New(pool, cfg, tracker.WithNow(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close() //nolint:errcheck
	tables := []string{tracker.DefaultTable + "_sagas", tracker.DefaultTable + "_types", tracker.DefaultTable + "_versions",
		tracker.DefaultTable + "_flow_events", tracker.DefaultTable + "_flow_edges", tracker.DefaultTable + "_flow_nodes",
		tracker.DefaultTable + "_meta"}
	if needed, err := tr.RebuildNeeded(ctx); err != nil || needed {
		t.Errorf("RebuildNeeded on the prefilled index = %v, %v; want false", needed, err)
	}
	var before [][]string
	for _, table := range tables {
		before = append(before, testenv.TableText(t, pool, table))
		if _, err := pool.Exec(ctx, `TRUNCATE `+table); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	for i, table := range tables {
		if after := testenv.TableText(t, pool, table); !slices.Equal(before[i], after) {
			for j := range min(len(before[i]), len(after)) {
				if before[i][j] != after[j] {
					t.Errorf("Rebuild writes %s otherwise: %d rows prefilled, %d rebuilt; first difference:\n%s\n%s", table, len(before[i]), len(after), before[i][j], after[j])
					break
				}
			}
			if len(before[i]) != len(after) {
				t.Errorf("Rebuild writes %d rows into %s, the prefill %d", len(after), table, len(before[i]))
			}
		}
	}
	usage, err := tr.Usage(ctx, retention)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(usage, func(u tracker.VersionUsage) bool { return u.Type == "payment.authorized" && u.Version == 2 }) ||
		!slices.ContainsFunc(usage, func(u tracker.VersionUsage) bool { return u.Type == "payment.authorized" && u.Version == 1 }) {
		t.Errorf("payment.authorized is not at versions 1 and 2: %+v", usage)
	}

	// The stuck list: the first 50 by deadline, each waiting on its step.
	list, err := tr.Find(ctx, tracker.Filter{Status: tracker.StatusStuck, Limit: consoleStuckSagas})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	rows, err := pool.Query(ctx, `SELECT correlation_id FROM `+tables[0]+` WHERE ended IS NULL AND deadline < $1
		ORDER BY deadline, correlation_id LIMIT $2`, now, consoleStuckSagas)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	if len(list) != consoleStuckSagas || len(want) != consoleStuckSagas {
		t.Fatalf("stuck list of %d sagas, %d in the summaries, want %d", len(list), len(want), consoleStuckSagas)
	}
	for i, s := range list {
		if s.CorrelationID != want[i] || s.Status != tracker.StatusStuck || s.Waiting == nil ||
			!slices.Contains([]string{"charge", "reserve stock", "confirm"}, s.Waiting.Step) || s.Waiting.After.ID == "" {
			t.Fatalf("stuck list entry %d: %+v, want %s stuck on a step after an indexed event", i, s, want[i])
		}
	}

	// Saga pages: every kind's events in order, each caused by the one before; a saga stuck
	// on stock has the authorization's dead letter.
	seen := map[string]bool{}
	for _, s := range append(list, mustFind(t, tr, tracker.Filter{Limit: 300})...) {
		tl, err := tr.Saga(ctx, s.CorrelationID)
		if err != nil {
			t.Fatal(err)
		}
		if len(tl.Sagas) != 1 || tl.Sagas[0].Status != s.Status || tl.Sagas[0].Events != len(tl.Events) {
			t.Fatalf("saga %s: %+v, listed as %+v", s.CorrelationID, tl.Sagas, s)
		}
		for i, e := range tl.Events {
			if i > 0 && (e.CausationID != tl.Events[i-1].ID || !e.Time.After(tl.Events[i-1].Time)) || e.TraceID == "" || e.Subject != s.CorrelationID {
				t.Fatalf("saga %s: event %d %+v does not follow %+v", s.CorrelationID, i, e, tl.Events[max(i-1, 0)])
			}
		}
		if s.Waiting != nil && s.Waiting.Step == "reserve stock" && (len(tl.DeadLetters) != 1 || tl.DeadLetters[0].Reason != "retries_exhausted") {
			t.Fatalf("saga %s stuck on stock: dead letters %+v", s.CorrelationID, tl.DeadLetters)
		}
		seen[tl.Events[len(tl.Events)-1].Type] = true
	}
	for _, typ := range []string{"order.confirmed", "order.rejected", "payment.authorized", "stock.reserved", "order.created"} {
		if !seen[typ] {
			t.Errorf("no saga page ended on %s: %v", typ, seen)
		}
	}

	// The flow of the whole prefill: the reference saga's edges, all by causation.
	flow, err := tr.Flow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range [][2]string{{"order.created", "payment.authorized"}, {"payment.authorized", "stock.reserved"},
		{"stock.reserved", "order.confirmed"}, {"order.created", "payment.declined"}, {"payment.refunded", "order.cancelled"}} {
		i := slices.IndexFunc(flow.Edges, func(f tracker.FlowEdge) bool { return f.From == e[0] && f.To == e[1] })
		if i < 0 || flow.Edges[i].ByCausation != flow.Edges[i].Count || flow.Edges[i].P50 <= 0 {
			t.Errorf("flow edge %s → %s: %+v", e[0], e[1], flow.Edges)
		}
	}
	if node, ok := flow.Node("order.created"); !ok || int64(node.Starts) != p.sagas {
		t.Errorf("order.created starts %d sagas, want %d", node.Starts, p.sagas)
	}
	// The console's window: the sagas of the last hour only.
	recent, err := tr.FlowRecent(ctx, consoleFlowWindow)
	if err != nil {
		t.Fatal(err)
	}
	if node, ok := recent.Node("order.created"); !ok || node.Starts <= 0 || int64(node.Starts) > p.sagas/100 {
		t.Errorf("order.created starts %d sagas in the last hour, want some, at most %d", node.Starts, p.sagas/100)
	}

	qs, err := timeQueries(ctx, pool, tr, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != len(consoleQueries(tr)) {
		t.Fatalf("%d queries timed, want %d", len(qs), len(consoleQueries(tr)))
	}
	for _, q := range qs {
		if q.Runs != 3 || q.Rows <= 0 || q.P50ms <= 0 || q.P99ms < q.P50ms || q.Ratio <= 0 {
			t.Errorf("query timing %+v", q)
		}
	}
}

func mustFind(t *testing.T, tr *tracker.Tracker, f tracker.Filter) []tracker.Summary {
	t.Helper()
	s, err := tr.Find(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
