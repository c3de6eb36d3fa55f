package tracker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Flow is the choreography as observed in the index: which event types follow which, in
// the same saga (correlation id), produced by which service, how often and how soon.
type Flow struct {
	Nodes []FlowNode // one per observed event type, by type
	Edges []FlowEdge // by From, To, Source
}

// FlowNode is one observed event type.
type FlowNode struct {
	Type    string   // ce_type
	Sources []string // the services that produced it (ce_source), sorted
	Topics  []string // the topics it was read from, sorted
	Count   int      // events of this type (distinct event ids per correlation id)
	Starts  int      // how many of them were the first event of their correlation id
	// Producers says which service produced it on which topic, by Source and Topic.
	Producers []Producer
}

// Producer is one service producing an event type on one topic, as observed.
type Producer struct {
	Source string // ce_source
	Topic  string
	Count  int // events
}

// FlowEdge is "events of type To followed events of type From", produced by Source.
// An event follows the event its causation id names when that event is indexed in the
// same correlation id, else the event before it in time.
type FlowEdge struct {
	From        string        // the preceding event's type
	To          string        // the following event's type
	Source      string        // the service that produced the To events
	Count       int           // how many To events followed a From event
	ByCausation int           // how many of them named their From event as causation id
	P50, P99    time.Duration // gap between the two events' times, percentiles over Count
}

// Flow computes the observed flow from the whole index (dead letters excluded). A
// redelivered or republished event (same event id in the same correlation id) counts once.
// It reads every indexed event; FlowRecent bounds the work.
func (t *Tracker) Flow(ctx context.Context) (Flow, error) { return t.FlowRecent(ctx, 0) }

// FlowRecent is Flow over the latest n indexed events by event time (all when n <= 0),
// read through the event-time index. A saga that began before them contributes only the
// edges among its events within them.
func (t *Tracker) FlowRecent(ctx context.Context, n int) (Flow, error) {
	var limit any // NULL: no limit
	if n > 0 {
		limit = n
	}
	const ev = `SELECT DISTINCT ON (correlation_id, event_id) correlation_id, event_id, type, source,
			topic, event_time, causation_id, partition, "offset"
		FROM (SELECT * FROM %[1]s WHERE NOT dead_letter ORDER BY event_time DESC LIMIT $1) AS recent
		ORDER BY correlation_id, event_id, event_time, topic, partition, "offset"`
	var f Flow
	rows, err := t.db.Query(ctx, fmt.Sprintf(`WITH ev AS (`+ev+`),
		seq AS (SELECT *, row_number() OVER (PARTITION BY correlation_id
			ORDER BY event_time, topic, partition, "offset") AS n FROM ev)
		SELECT type, source, topic, count(*), count(*) FILTER (WHERE n = 1)
		FROM seq GROUP BY type, source, topic`, t.table), limit)
	if err != nil {
		return f, fmt.Errorf("tracker: flow: %w", err)
	}
	nodes := map[string]*FlowNode{}
	var (
		typ           string
		p             Producer
		count, starts int64
	)
	_, err = pgx.ForEachRow(rows, []any{&typ, &p.Source, &p.Topic, &count, &starts}, func() error {
		n := nodes[typ]
		if n == nil {
			n = &FlowNode{Type: typ}
			nodes[typ] = n
		}
		p.Count = int(count)
		n.Producers = append(n.Producers, p)
		n.Count += int(count)
		n.Starts += int(starts)
		return nil
	})
	if err != nil {
		return f, fmt.Errorf("tracker: flow nodes: %w", err)
	}
	for _, n := range nodes {
		slices.SortFunc(n.Producers, func(a, b Producer) int {
			return cmp.Or(strings.Compare(a.Source, b.Source), strings.Compare(a.Topic, b.Topic))
		})
		for _, p := range n.Producers {
			if !slices.Contains(n.Sources, p.Source) {
				n.Sources = append(n.Sources, p.Source)
			}
			if !slices.Contains(n.Topics, p.Topic) {
				n.Topics = append(n.Topics, p.Topic)
			}
		}
		slices.Sort(n.Topics)
		f.Nodes = append(f.Nodes, *n)
	}
	rows, err = t.db.Query(ctx, fmt.Sprintf(`WITH ev AS (`+ev+`),
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
		FROM edge GROUP BY from_type, to_type, source`, t.table), limit)
	if err != nil {
		return f, fmt.Errorf("tracker: flow: %w", err)
	}
	f.Edges, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (FlowEdge, error) {
		var e FlowEdge
		var count, caused int64
		var p50, p99 float64
		err := r.Scan(&e.From, &e.To, &e.Source, &count, &caused, &p50, &p99)
		e.Count, e.ByCausation = int(count), int(caused)
		e.P50, e.P99 = seconds(p50), seconds(p99)
		return e, err
	})
	if err != nil {
		return f, fmt.Errorf("tracker: flow edges: %w", err)
	}
	// Sorted here, not by the database's collation, so that Node's search agrees.
	slices.SortFunc(f.Nodes, func(a, b FlowNode) int { return strings.Compare(a.Type, b.Type) })
	slices.SortFunc(f.Edges, func(a, b FlowEdge) int {
		return cmp.Or(strings.Compare(a.From, b.From), strings.Compare(a.To, b.To), strings.Compare(a.Source, b.Source))
	})
	return f, nil
}

// seconds converts a gap in seconds to a Duration rounded to the microsecond (event times
// have microsecond precision in Postgres).
func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond)
}

// Node returns the node of event type typ.
func (f Flow) Node(typ string) (FlowNode, bool) {
	i, ok := slices.BinarySearchFunc(f.Nodes, typ, func(n FlowNode, t string) int { return strings.Compare(n.Type, t) })
	if !ok {
		return FlowNode{}, false
	}
	return f.Nodes[i], true
}
