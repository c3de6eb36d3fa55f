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
	P50, P99    time.Duration // gap between the two events' times, percentiles over Count (within GapResolution)
}

// Flow is the observed flow of the whole index (dead letters excluded). A redelivered or
// republished event (same event id in the same correlation id) counts once. It reads the
// per-minute tallies ingest keeps (see FlowRecent), every minute of them.
func (t *Tracker) Flow(ctx context.Context) (Flow, error) { return t.flowSince(ctx, time.Time{}) }

// FlowRecent is Flow over the events of the last window by event time, before the
// tracker's clock (WithNow), in whole minutes (UTC): the minute now−window falls in and
// every later one. An event's edge is the one it has in its whole correlation id, so a
// saga that began before the window contributes the edges into its events within it.
// Ingest tallies the flow per minute, so the work is that of the window's minutes and
// edges, not of its events: the counts are exact, P50 and P99 come from a histogram of
// the gaps and are within GapResolution of the exact percentiles. A window <= 0 is the
// whole index (Flow).
func (t *Tracker) FlowRecent(ctx context.Context, window time.Duration) (Flow, error) {
	if window <= 0 {
		return t.Flow(ctx)
	}
	return t.flowSince(ctx, t.now().Add(-window))
}

// flowSince is the flow of the minutes from the one since falls in on (all when zero).
func (t *Tracker) flowSince(ctx context.Context, since time.Time) (Flow, error) {
	var from any = "-infinity"
	if !since.IsZero() {
		from = since.UTC().Truncate(time.Minute)
	}
	var f Flow
	rows, err := t.db.Query(ctx, `SELECT type, source, topic, sum(count), sum(starts) FROM `+t.flowNodesTable()+`
		WHERE minute >= $1 GROUP BY type, source, topic HAVING sum(count) > 0`, from)
	if err != nil {
		return f, fmt.Errorf("tracker: flow nodes: %w", err)
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
	if f.Edges, err = t.flowEdges(ctx, from); err != nil {
		return f, err
	}
	// Sorted here, not by the database's collation, so that Node's search agrees.
	slices.SortFunc(f.Nodes, func(a, b FlowNode) int { return strings.Compare(a.Type, b.Type) })
	slices.SortFunc(f.Edges, func(a, b FlowEdge) int {
		return cmp.Or(strings.Compare(a.From, b.From), strings.Compare(a.To, b.To), strings.Compare(a.Source, b.Source))
	})
	return f, nil
}

// flowEdges sums the edge tallies of the minutes from from on, with each edge's gap
// percentiles from its histogram.
func (t *Tracker) flowEdges(ctx context.Context, from any) ([]FlowEdge, error) {
	rows, err := t.db.Query(ctx, `SELECT from_type, to_type, source, gap_bucket, sum(count), sum(caused)
		FROM `+t.flowEdgesTable()+` WHERE minute >= $1 GROUP BY from_type, to_type, source, gap_bucket`, from)
	if err != nil {
		return nil, fmt.Errorf("tracker: flow edges: %w", err)
	}
	type key struct{ from, to, source string }
	edges := map[key]*FlowEdge{}
	gaps := map[key]gapHistogram{}
	var (
		k             key
		bucket        int16
		count, caused int64
	)
	_, err = pgx.ForEachRow(rows, []any{&k.from, &k.to, &k.source, &bucket, &count, &caused}, func() error {
		e := edges[k]
		if e == nil {
			e = &FlowEdge{From: k.from, To: k.to, Source: k.source}
			edges[k], gaps[k] = e, gapHistogram{}
		}
		e.Count += int(count)
		e.ByCausation += int(caused)
		gaps[k][int(bucket)] += count
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tracker: flow edges: %w", err)
	}
	out := make([]FlowEdge, 0, len(edges))
	for k, e := range edges {
		if e.Count <= 0 {
			continue
		}
		e.P50, e.P99 = gaps[k].percentile(0.5), gaps[k].percentile(0.99)
		out = append(out, *e)
	}
	return out, nil
}

// Node returns the node of event type typ.
func (f Flow) Node(typ string) (FlowNode, bool) {
	i, ok := slices.BinarySearchFunc(f.Nodes, typ, func(n FlowNode, t string) int { return strings.Compare(n.Type, t) })
	if !ok {
		return FlowNode{}, false
	}
	return f.Nodes[i], true
}
