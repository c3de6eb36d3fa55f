package tracker_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

// edgeKey names a flow edge.
type edgeKey struct{ from, to, source string }

// exactFlow computes the flow from every indexed event in SQL, the gaps exact: each
// distinct event (correlation id × event id, dead letters left out, at its first place)
// follows the event its causation id names when indexed, else the one before it.
func exactFlow(t *testing.T, db *pgxpool.Pool, table string) (map[edgeKey]tracker.FlowEdge, map[string][2]int) {
	t.Helper()
	ctx := context.Background()
	const ev = `SELECT DISTINCT ON (correlation_id, event_id) correlation_id, event_id, type, source,
			topic, event_time, causation_id, partition, "offset"
		FROM %[1]s WHERE NOT dead_letter
		ORDER BY correlation_id, event_id, event_time, topic, partition, "offset"`
	rows, err := db.Query(ctx, fmt.Sprintf(`WITH ev AS (`+ev+`),
		seq AS (SELECT *, lag(type) OVER w AS prev_type, lag(event_time) OVER w AS prev_time
			FROM ev WINDOW w AS (PARTITION BY correlation_id ORDER BY event_time, topic, partition, "offset")),
		edge AS (SELECT coalesce(c.type, s.prev_type) AS from_type, s.type AS to_type, s.source,
				c.type IS NOT NULL AS caused,
				extract(epoch FROM s.event_time - coalesce(c.event_time, s.prev_time)) AS gap
			FROM seq s LEFT JOIN ev c ON s.causation_id <> '' AND c.correlation_id = s.correlation_id
				AND c.event_id = s.causation_id
			WHERE c.type IS NOT NULL OR s.prev_type IS NOT NULL)
		SELECT from_type, to_type, source, count(*), count(*) FILTER (WHERE caused),
			percentile_cont(0.5) WITHIN GROUP (ORDER BY gap), percentile_cont(0.99) WITHIN GROUP (ORDER BY gap)
		FROM edge GROUP BY from_type, to_type, source`, table))
	if err != nil {
		t.Fatal(err)
	}
	edges := map[edgeKey]tracker.FlowEdge{}
	for rows.Next() {
		var e tracker.FlowEdge
		var p50, p99 float64
		if err := rows.Scan(&e.From, &e.To, &e.Source, &e.Count, &e.ByCausation, &p50, &p99); err != nil {
			t.Fatal(err)
		}
		e.P50, e.P99 = time.Duration(p50*float64(time.Second)), time.Duration(p99*float64(time.Second))
		edges[edgeKey{e.From, e.To, e.Source}] = e
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows, err = db.Query(ctx, fmt.Sprintf(`WITH ev AS (`+ev+`),
		seq AS (SELECT *, row_number() OVER (PARTITION BY correlation_id
			ORDER BY event_time, topic, partition, "offset") AS n FROM ev)
		SELECT type || ' ' || source || ' ' || topic, count(*), count(*) FILTER (WHERE n = 1)
		FROM seq GROUP BY type, source, topic`, table))
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string][2]int{}
	for rows.Next() {
		var k string
		var c [2]int
		if err := rows.Scan(&k, &c[0], &c[1]); err != nil {
			t.Fatal(err)
		}
		nodes[k] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return edges, nodes
}

// sameFlow fails t unless f has exactly the edges and nodes of the exact computation,
// counts equal, percentiles within the histogram's resolution.
func sameFlow(t *testing.T, what string, f tracker.Flow, edges map[edgeKey]tracker.FlowEdge, nodes map[string][2]int) {
	t.Helper()
	if len(f.Edges) != len(edges) {
		t.Errorf("%s: %d edges, the exact computation %d: %+v", what, len(f.Edges), len(edges), f.Edges)
	}
	for _, e := range f.Edges {
		w, ok := edges[edgeKey{e.From, e.To, e.Source}]
		if !ok || e.Count != w.Count || e.ByCausation != w.ByCausation || !near(e.P50, w.P50) || !near(e.P99, w.P99) {
			t.Errorf("%s: edge %+v, exactly %+v (%v)", what, e, w, ok)
		}
	}
	n := 0
	for _, node := range f.Nodes {
		starts := 0
		for _, p := range node.Producers {
			w := nodes[node.Type+" "+p.Source+" "+p.Topic]
			if p.Count != w[0] {
				t.Errorf("%s: node %s by %s on %s: %d events, exactly %d", what, node.Type, p.Source, p.Topic, p.Count, w[0])
			}
			starts += w[1]
			n++
		}
		if node.Starts != starts {
			t.Errorf("%s: node %s starts %d, exactly %d", what, node.Type, node.Starts, starts)
		}
	}
	if n != len(nodes) {
		t.Errorf("%s: %d producers, exactly %d", what, n, len(nodes))
	}
}

// noEmptyTallies fails t if a tally of table's flow is zero or negative.
func noEmptyTallies(t *testing.T, db *pgxpool.Pool, table string) {
	t.Helper()
	var bad int
	if err := db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM `+table+`_flow_edges WHERE count <= 0 OR caused < 0)
		+ (SELECT count(*) FROM `+table+`_flow_nodes WHERE count <= 0 OR starts < 0)`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad > 0 {
		t.Errorf("%d flow tallies at zero or below", bad)
	}
}

// The flow from the per-minute tallies is the flow computed from the events, whatever
// the order the records arrive in (a follower before its cause, across batches),
// redelivered (same position) or republished (same event id, new position), with dead
// letters and events without causation; Rebuild makes the same tallies; retention takes
// whole sagas off the tallies and deletes the minutes it empties.
func TestFlowTalliesMatchEvents(t *testing.T) {
	ctx := context.Background()
	db := testenv.Postgres(t)
	table := testenv.Name(t, "flowtally")
	now := t0.Add(3 * time.Hour)
	tr := migratedTracker(t, db, table, tracker.WithNow(func() time.Time { return now }), tracker.WithRetention(2*time.Hour))

	rng := rand.New(rand.NewPCG(1, 2))
	paths := [][][2]string{
		{{"order", "order.created"}, {"payment", "payment.authorized"}, {"inventory", "stock.reserved"}, {"order", "order.confirmed"}},
		{{"order", "order.created"}, {"payment", "payment.declined"}, {"order", "order.rejected"}},
		{{"order", "order.created"}, {"payment", "payment.authorized"}, {"inventory", "stock.unavailable"},
			{"payment", "payment.refunded"}, {"order", "order.rejected"}},
	}
	var recs []*kgo.Record
	var off int64
	for i := range 60 {
		evs := chain(t, fmt.Sprintf("o-%02d", i), paths[i%len(paths)]...)
		// Half the sagas an hour apart from the other half (retention deletes the older), the
		// gaps from 0 to 10 s in microseconds.
		at := t0.Add(time.Duration(i%2) * 2 * time.Hour).Add(time.Duration(i) * 7 * time.Second)
		for j := range evs {
			if j > 0 {
				at = at.Add(time.Duration(rng.Int64N(int64(10 * time.Second))).Truncate(time.Microsecond))
			}
			evs[j].Time = at
		}
		switch i % 5 {
		case 1: // the last event names no cause: it follows the one before it in time
			evs[len(evs)-1].CausationID = ""
		case 2: // the last event names the first as cause, not the one before it
			evs[len(evs)-1].CausationID = evs[0].ID
		}
		for _, r := range records(t, "orders", evs) {
			r.Offset, off = off, off+1
			recs = append(recs, r)
		}
		if i%4 == 0 { // republished at a new position: counts once
			r := records(t, "orders", evs[1:2])[0]
			r.Offset, off = off, off+1
			recs = append(recs, r)
		}
		if i%6 == 0 { // a dead letter: not in the flow
			r := records(t, "orders"+tracker.DLQSuffix, evs[1:2])[0]
			r.Offset = int64(i)
			recs = append(recs, r)
		}
	}
	// Out of order, in batches of 7, each batch then delivered again.
	rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	for i := 0; i < len(recs); i += 7 {
		batch := recs[i:min(i+7, len(recs))]
		for range 2 {
			if _, err := tr.Ingest(ctx, batch...); err != nil {
				t.Fatal(err)
			}
		}
	}
	edges, nodes := exactFlow(t, db, table)
	if len(edges) < 6 {
		t.Fatalf("the exact flow has %d edges", len(edges))
	}
	f, err := tr.Flow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sameFlow(t, "after ingest", f, edges, nodes)
	noEmptyTallies(t, db, table)

	// Rebuild from nothing writes the same tallies.
	before := testenv.TableText(t, db, table+"_flow_edges")
	if _, err := db.Exec(ctx, `TRUNCATE `+table+`_flow_events, `+table+`_flow_edges, `+table+`_flow_nodes`); err != nil {
		t.Fatal(err)
	}
	if err := tr.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if after := testenv.TableText(t, db, table+"_flow_edges"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("Rebuild's tallies differ:\n%v\n%v", before, after)
	}

	// Retention (2 h before now): the older half of the sagas goes, with their minutes.
	if _, err := tr.Retain(ctx); err != nil {
		t.Fatal(err)
	}
	var oldMinutes int
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+table+`_flow_edges WHERE minute < $1)
		+ (SELECT count(*) FROM `+table+`_flow_nodes WHERE minute < $1)
		+ (SELECT count(*) FROM `+table+`_flow_events WHERE event_time < $1)`, now.Add(-2*time.Hour)).Scan(&oldMinutes); err != nil {
		t.Fatal(err)
	}
	if oldMinutes != 0 {
		t.Errorf("%d flow rows and tallies older than the retention left", oldMinutes)
	}
	edges, nodes = exactFlow(t, db, table)
	if f, err = tr.Flow(ctx); err != nil {
		t.Fatal(err)
	}
	sameFlow(t, "after retention", f, edges, nodes)
	noEmptyTallies(t, db, table)
	if created, _ := f.Node("order.created"); created.Starts != 30 {
		t.Errorf("order.created starts %d sagas after retention, want the newer 30", created.Starts)
	}
}

// A follower indexed before its cause follows the event before it until the cause is
// indexed, then its cause, and the tallies keep nothing of the first pairing.
func TestFlowCauseArrivesLate(t *testing.T) {
	ctx := context.Background()
	db := testenv.Postgres(t)
	table := testenv.Name(t, "flowlate")
	tr := migratedTracker(t, db, table)
	evs := chain(t, "o-late", [2]string{"order", "order.created"}, [2]string{"payment", "payment.authorized"},
		[2]string{"inventory", "stock.reserved"})
	var off int64 = 10
	ingestAt(t, tr, "orders", &off, evs[0], evs[2]) // stock.reserved, its cause not yet indexed
	f, err := tr.Flow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Edges) != 1 || f.Edges[0].From != "order.created" || f.Edges[0].To != "stock.reserved" || f.Edges[0].ByCausation != 0 {
		t.Fatalf("before its cause: %+v; want stock.reserved after order.created by time", f.Edges)
	}
	off = 0
	ingestAt(t, tr, "orders", &off, evs[1]) // the cause, at an earlier position
	if f, err = tr.Flow(ctx); err != nil {
		t.Fatal(err)
	}
	want := []tracker.FlowEdge{
		{From: "order.created", To: "payment.authorized", Source: "payment", Count: 1, ByCausation: 1},
		{From: "payment.authorized", To: "stock.reserved", Source: "inventory", Count: 1, ByCausation: 1},
	}
	if len(f.Edges) != len(want) {
		t.Fatalf("after its cause: %+v; want %+v", f.Edges, want)
	}
	for i, w := range want {
		e := f.Edges[i]
		if e.From != w.From || e.To != w.To || e.Source != w.Source || e.Count != 1 || e.ByCausation != 1 || !near(e.P50, time.Second) {
			t.Errorf("edge %d: %+v; want %+v, 1 s", i, e, w)
		}
	}
	noEmptyTallies(t, db, table)
}

// exactFlowRows is every distinct event's place in the flow computed in SQL from every
// indexed event, as text, in a stable order; flowEventRows is the same columns of the
// table ingest keeps.
func exactFlowRows(t *testing.T, db *pgxpool.Pool, table string) []string {
	t.Helper()
	return testenv.QueryText(t, db, fmt.Sprintf(`WITH ev AS (SELECT DISTINCT ON (correlation_id, event_id) correlation_id, event_id,
			type, source, topic, event_time, causation_id, partition, "offset"
		FROM %[1]s WHERE NOT dead_letter ORDER BY correlation_id, event_id, event_time, topic, partition, "offset"),
		seq AS (SELECT *, lag(type) OVER w AS prev_type, lag(event_time) OVER w AS prev_time, row_number() OVER w AS n
			FROM ev WINDOW w AS (PARTITION BY correlation_id ORDER BY event_time, topic, partition, "offset"))
		SELECT row(s.correlation_id, s.event_id, s.type, s.source, s.topic, s.event_time, s.n = 1,
			coalesce(c.type, s.prev_type), c.type IS NOT NULL,
			(extract(epoch FROM s.event_time - coalesce(c.event_time, s.prev_time)) * 1000000)::bigint)::text
		FROM seq s LEFT JOIN ev c ON s.causation_id <> '' AND c.correlation_id = s.correlation_id
			AND c.event_id = s.causation_id ORDER BY 1`, table))
}

func flowEventRows(t *testing.T, db *pgxpool.Pool, table string) []string {
	t.Helper()
	return testenv.QueryText(t, db, `SELECT row(correlation_id, event_id, type, source, topic, event_time, first, from_type,
		caused, gap_us)::text FROM `+table+`_flow_events ORDER BY 1`)
}

// Ingest writes only the flow rows a batch's records can change, and after every batch
// the table holds every event's exact place: records in small shuffled batches, copies
// of events republished on a topic that sorts first (the event moves earlier, the one
// after its former place follows another), events at the same time, causes named later
// in time or never indexed, dead letters, and a batch indexed again after its flow rows
// were lost puts them back.
func TestFlowRowsOfEachBatchKeepEveryPlaceExact(t *testing.T) {
	ctx := context.Background()
	db := testenv.Postgres(t)
	table := testenv.Name(t, "flowrows")
	tr := migratedTracker(t, db, table)
	rng := rand.New(rand.NewPCG(3, 4))
	types := [][2]string{{"order", "order.created"}, {"payment", "payment.authorized"}, {"inventory", "stock.reserved"},
		{"order", "order.confirmed"}, {"payment", "payment.refunded"}}
	var recs []*kgo.Record
	offsets := map[string]int64{}
	add := func(topic string, e event.Event) {
		r := records(t, topic, []event.Event{e})[0]
		r.Offset = offsets[topic]
		offsets[topic]++
		recs = append(recs, r)
	}
	for i := range 12 {
		evs := chain(t, fmt.Sprintf("o-%02d", i), types[:2+rng.IntN(len(types)-1)]...)
		for j := range evs {
			evs[j].Time = t0.Add(time.Duration(rng.IntN(4)) * time.Second) // ties and causes after their followers
			switch rng.IntN(6) {
			case 0:
				evs[j].CausationID = ""
			case 1:
				evs[j].CausationID = "never-indexed"
			case 2:
				evs[j].CausationID = evs[rng.IntN(len(evs))].ID
			}
		}
		for j, e := range evs {
			add("orders", e)
			if rng.IntN(3) == 0 { // republished on a topic that sorts before "orders"
				add("a-orders", e)
			}
			if rng.IntN(4) == 0 { // republished on one that sorts after it
				add("z-orders", evs[(j+1)%len(evs)])
			}
			if rng.IntN(5) == 0 {
				add("orders"+tracker.DLQSuffix, e)
			}
		}
	}
	rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	for i := 0; i < len(recs); {
		batch := recs[i:min(i+1+rng.IntN(3), len(recs))]
		i += len(batch)
		if _, err := tr.Ingest(ctx, batch...); err != nil {
			t.Fatal(err)
		}
		if got, want := flowEventRows(t, db, table), exactFlowRows(t, db, table); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after %d records, the flow rows\n%v\ndiffer from the exact places\n%v", i, got, want)
		}
	}
	tallies := sameTalliesAsRebuild(t, tr, db, table)

	// A batch whose flow rows were not written (a crash after its records were indexed)
	// gets them when it is delivered again.
	if _, err := db.Exec(ctx, `DELETE FROM `+table+`_flow_events WHERE correlation_id = 'o-03'`); err != nil {
		t.Fatal(err)
	}
	var again []*kgo.Record
	for _, r := range recs {
		if string(r.Key) == "o-03" || header(r, event.HeaderCorrelationID) == "o-03" {
			again = append(again, r)
		}
	}
	if len(again) == 0 {
		t.Fatal("no records of o-03")
	}
	if _, err := tr.Ingest(ctx, again...); err != nil {
		t.Fatal(err)
	}
	if got, want := flowEventRows(t, db, table), exactFlowRows(t, db, table); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after o-03's records were delivered again, the flow rows\n%v\ndiffer from the exact places\n%v", got, want)
	}
	if after := sameTalliesAsRebuild(t, tr, db, table); fmt.Sprint(after) != fmt.Sprint(tallies) {
		t.Errorf("the tallies after o-03's records were delivered again\n%v\ndiffer from those before\n%v", after, tallies)
	}
}

// sameTalliesAsRebuild fails t unless the flow's tallies, none empty, are those Rebuild
// writes from nothing, and returns them.
func sameTalliesAsRebuild(t *testing.T, tr *tracker.Tracker, db *pgxpool.Pool, table string) [][]string {
	t.Helper()
	noEmptyTallies(t, db, table)
	before := [][]string{testenv.TableText(t, db, table+"_flow_edges"), testenv.TableText(t, db, table+"_flow_nodes")}
	if _, err := db.Exec(context.Background(), `TRUNCATE `+table+`_flow_events, `+table+`_flow_edges, `+table+`_flow_nodes`); err != nil {
		t.Fatal(err)
	}
	if err := tr.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := [][]string{testenv.TableText(t, db, table+"_flow_edges"), testenv.TableText(t, db, table+"_flow_nodes")}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the tallies kept at ingest\n%v\ndiffer from Rebuild's\n%v", before, after)
	}
	return after
}

// header is the value of r's header key, or "".
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// migratedTracker is a tracker of the orders saga on table, its schema migrated, closed
// when the test ends.
func migratedTracker(t *testing.T, db *pgxpool.Pool, table string, opts ...tracker.Option) *tracker.Tracker {
	t.Helper()
	tr, err := tracker.New(db, sagaConfig("orders"), append([]tracker.Option{tracker.WithTable(table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	if err := tracker.Migrate(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	return tr
}
