package tracker

import (
	"time"

	"github.com/jackc/pgx/v5"
)

// flowEventsTable names the table of every distinct event's place in the flow; the
// triggers of schema.sql tally it per minute into flowEdgesTable and flowNodesTable.
func (t *Tracker) flowEventsTable() string { return t.table + "_flow_events" }
func (t *Tracker) flowEdgesTable() string  { return t.table + "_flow_edges" }
func (t *Tracker) flowNodesTable() string  { return t.table + "_flow_nodes" }

// flowRow is one distinct event of a correlation id and its place in the flow, as
// queueFlowRows sends it.
type flowRow struct {
	CorrelationID string
	EventID       string
	Type          string
	Source        string
	Topic         string
	EventTime     time.Time
	First         bool      // the first event of its correlation id
	FromType      *string   // the type of the event it follows; nil when none
	Caused        bool      // it follows the event its causation id names
	GapMicros     *int64    // its time less the followed event's; nil when none
	Indexed       time.Time // the latest indexed_at of the rows it was computed from
	Seen          int       // how many rows it was computed from
}

// position is where a record sits in Kafka, the index's primary key.
type position struct {
	topic     string
	partition int32
	offset    int64
}

// flowRows places the events of one correlation id (group, in the order of event time,
// topic, partition and offset) in the flow: dead letters left out, an event id indexed
// twice taken at its first place, each event following the event its causation id names
// when that is indexed in the correlation id, else the event before it.
//
// With batch nil it returns every event's row. Otherwise batch holds the positions of the
// records just indexed (or indexed again), and it returns only the rows those records can
// have changed: their own events', the event placed next after each of those records
// (which may now follow it, or follow another event in place of a copy that moved
// earlier, or no longer come first), and the events whose causation id names one of
// theirs. Every other event keeps the place it had without them.
func flowRows(group []entry, indexed time.Time, batch map[position]bool) []flowRow {
	var events []entry
	at := map[string]int{} // event id → index in events
	for _, e := range group {
		if e.dead {
			continue
		}
		if _, dup := at[e.id]; dup {
			continue
		}
		at[e.id] = len(events)
		events = append(events, e)
	}
	changed := make([]bool, len(events))
	if batch == nil {
		for i := range changed {
			changed[i] = true
		}
	} else {
		batchIDs := map[string]bool{}
		markNext := false
		for _, e := range group {
			if e.dead {
				continue
			}
			i := at[e.id]
			first := events[i].topic == e.topic && events[i].partition == e.partition && events[i].offset == e.offset
			if first && markNext {
				changed[i], markNext = true, false
			}
			if batch[position{e.topic, e.partition, e.offset}] {
				changed[i], markNext, batchIDs[e.id] = true, true, true
			}
		}
		for i, e := range events {
			if e.causation != "" && batchIDs[e.causation] {
				changed[i] = true
			}
		}
	}
	var out []flowRow
	for i, e := range events {
		if !changed[i] {
			continue
		}
		r := flowRow{CorrelationID: e.corr, EventID: e.id, Type: e.typ, Source: e.source, Topic: e.topic,
			EventTime: e.at, First: i == 0, Indexed: indexed, Seen: len(group)}
		var from *entry
		if c, ok := at[e.causation]; ok && e.causation != "" {
			from, r.Caused = &events[c], true
		} else if i > 0 {
			from = &events[i-1]
		}
		if from != nil {
			typ, gap := from.typ, e.at.Sub(from.at).Microseconds()
			r.FromType, r.GapMicros = &typ, &gap
		}
		out = append(out, r)
	}
	return out
}

// queueFlowRows queues the upsert of rows, sent as arrays. A row is replaced only when its
// place in the flow changed and by one computed from as late an indexed row and at least
// as many rows (as summaries are), so the tallies change only when a place does.
func (t *Tracker) queueFlowRows(b *pgx.Batch, rows []flowRow) {
	if len(rows) == 0 {
		return
	}
	n := len(rows)
	var (
		corrs, ids, types, sources, topics = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		times, indexed                     = make([]time.Time, n), make([]time.Time, n)
		first, caused                      = make([]bool, n), make([]bool, n)
		fromTypes                          = make([]*string, n)
		gaps                               = make([]*int64, n)
		seen                               = make([]int32, n)
	)
	for i, r := range rows {
		corrs[i], ids[i], types[i], sources[i], topics[i] = r.CorrelationID, r.EventID, r.Type, r.Source, r.Topic
		times[i], indexed[i], first[i], caused[i] = r.EventTime, r.Indexed, r.First, r.Caused
		fromTypes[i], gaps[i], seen[i] = r.FromType, r.GapMicros, int32(r.Seen)
	}
	b.Queue(`INSERT INTO `+t.flowEventsTable()+` AS f (`+flowCols+`)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[],
			$7::boolean[], $8::text[], $9::boolean[], $10::bigint[], $11::timestamptz[], $12::integer[])
			AS r(`+flowCols+`)
		ORDER BY correlation_id, event_id
		ON CONFLICT (correlation_id, event_id) DO UPDATE SET type = excluded.type, source = excluded.source,
		topic = excluded.topic, event_time = excluded.event_time, first = excluded.first,
		from_type = excluded.from_type, caused = excluded.caused, gap_us = excluded.gap_us,
		indexed = excluded.indexed, seen = excluded.seen
		WHERE (f.indexed, f.seen) <= (excluded.indexed, excluded.seen)
		AND (f.type, f.source, f.topic, f.event_time, f.first, f.from_type, f.caused, f.gap_us) IS DISTINCT FROM
			(excluded.type, excluded.source, excluded.topic, excluded.event_time, excluded.first, excluded.from_type,
			excluded.caused, excluded.gap_us)`,
		corrs, ids, types, sources, topics, times, first, fromTypes, caused, gaps, indexed, seen)
}

const flowCols = `correlation_id, event_id, type, source, topic, event_time, first, from_type, caused, gap_us, indexed, seen`
