package tracker

import (
	"encoding/json"
	"fmt"
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
	CorrelationID string    `json:"correlation_id"`
	EventID       string    `json:"event_id"`
	Type          string    `json:"type"`
	Source        string    `json:"source"`
	Topic         string    `json:"topic"`
	EventTime     time.Time `json:"event_time"`
	First         bool      `json:"first"`     // the first event of its correlation id
	FromType      *string   `json:"from_type"` // the type of the event it follows; nil when none
	Caused        bool      `json:"caused"`    // it follows the event its causation id names
	GapMicros     *int64    `json:"gap_us"`    // its time less the followed event's; nil when none
	Indexed       time.Time `json:"indexed"`   // the latest indexed_at of the rows it was computed from
	Seen          int       `json:"seen"`      // how many rows it was computed from
}

// flowRows places the events of one correlation id (group, in the order of event time,
// topic, partition and offset) in the flow: dead letters left out, an event id indexed
// twice taken at its first place, each event following the event its causation id names
// when that is indexed in the correlation id, else the event before it.
func flowRows(group []entry, indexed time.Time) []flowRow {
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
	out := make([]flowRow, 0, len(events))
	for i, e := range events {
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

// queueFlowRows queues the upsert of rows. A row is replaced only when its place in the
// flow changed and by one computed from as late an indexed row and at least as many rows
// (as summaries are), so the tallies change only when a place does.
func (t *Tracker) queueFlowRows(b *pgx.Batch, rows []flowRow) error {
	if len(rows) == 0 {
		return nil
	}
	doc, err := json.Marshal(rows)
	if err != nil {
		return fmt.Errorf("tracker: flow rows: %w", err)
	}
	b.Queue(`INSERT INTO `+t.flowEventsTable()+` AS f (`+flowCols+`)
		SELECT `+flowCols+` FROM jsonb_to_recordset($1::jsonb) AS r(correlation_id text, event_id text, type text,
			source text, topic text, event_time timestamptz, first boolean, from_type text, caused boolean,
			gap_us bigint, indexed timestamptz, seen integer)
		ORDER BY correlation_id, event_id
		ON CONFLICT (correlation_id, event_id) DO UPDATE SET type = excluded.type, source = excluded.source,
		topic = excluded.topic, event_time = excluded.event_time, first = excluded.first,
		from_type = excluded.from_type, caused = excluded.caused, gap_us = excluded.gap_us,
		indexed = excluded.indexed, seen = excluded.seen
		WHERE (f.indexed, f.seen) <= (excluded.indexed, excluded.seen)
		AND (f.type, f.source, f.topic, f.event_time, f.first, f.from_type, f.caused, f.gap_us) IS DISTINCT FROM
			(excluded.type, excluded.source, excluded.topic, excluded.event_time, excluded.first, excluded.from_type,
			excluded.caused, excluded.gap_us)`, string(doc))
	return nil
}

const flowCols = `correlation_id, event_id, type, source, topic, event_time, first, from_type, caused, gap_us, indexed, seen`
