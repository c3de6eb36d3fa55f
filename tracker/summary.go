package tracker

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// never is a clock past every deadline: evaluating with it opens every unmet expectation,
// so the stored deadline is the earliest one whatever the time of the query.
var never = time.Unix(math.MaxInt32, 0)

// sagasTable and typesTable name the summary tables of the index table t.table.
func (t *Tracker) sagasTable() string { return t.table + "_sagas" }
func (t *Tracker) typesTable() string { return t.table + "_types" }

// summarize recomputes the summaries of the correlation ids of entries from every row
// indexed under them, and records the producers of their event types. A summary is
// replaced only by one computed from a later-indexed row, or from as late a row and at
// least as many rows, so a computation that missed a row another instance was writing
// never overwrites one that saw it, and one after retention deleted old rows still does.
// Ingest calls it after each batch, for the batch's correlation ids, fresh or redelivered,
// so a batch whose summaries were not written (a crash in between) gets them when
// redelivered. It returns when each saga of those correlation ids started, for
// recordLatency.
func (t *Tracker) summarize(ctx context.Context, entries []entry) (map[startKey]time.Time, error) {
	var corrs []string
	seen := map[string]bool{}
	for _, e := range entries {
		if !seen[e.corr] {
			seen[e.corr] = true
			corrs = append(corrs, e.corr)
		}
	}
	batch := make(map[position]bool, len(entries))
	for _, e := range entries {
		batch[position{e.topic, e.partition, e.offset}] = true
	}
	var sums []summaryRow
	err := t.sendBatch(ctx, "summarize", func(b *pgx.Batch) error {
		var err error
		if sums, err = t.queueSummaries(ctx, b, corrs, batch); err != nil {
			return err
		}
		t.queueTypes(b, entries)
		t.queueVersions(b, entries)
		return nil
	})
	if err != nil {
		return nil, err
	}
	starts := make(map[startKey]time.Time, len(sums))
	for _, s := range sums {
		starts[startKey{s.CorrelationID, s.Saga}] = s.Started
	}
	return starts, nil
}

// queueSummaries reads the rows of corrs and queues the upsert of their summaries, which
// it returns, and of their events' places in the flow (queueFlowRows): those the records
// at the positions in batch can have changed, or every event's when batch is nil (see
// flowRows).
func (t *Tracker) queueSummaries(ctx context.Context, b *pgx.Batch, corrs []string, batch map[position]bool) ([]summaryRow, error) {
	if len(corrs) == 0 {
		return nil, nil
	}
	rows, err := t.db.Query(ctx, `SELECT `+selectCols+` FROM `+t.table+
		` WHERE correlation_id = ANY($1) ORDER BY correlation_id, event_time, topic, partition, "offset"`, corrs)
	if err != nil {
		return nil, fmt.Errorf("tracker: summarize: %w", err)
	}
	entries, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return nil, fmt.Errorf("tracker: summarize: %w", err)
	}
	var (
		sums  []summaryRow
		flows []flowRow
	)
	for group := range groupByCorrelation(entries) {
		last, indexed := group[0].at, group[0].indexed
		for _, e := range group {
			last, indexed = maxTime(last, e.at), maxTime(indexed, e.indexed)
		}
		flows = append(flows, flowRows(group, indexed, batch)...)
		for _, s := range t.evaluate(group[0].corr, group, nil, never) {
			r := summaryRow{CorrelationID: s.CorrelationID, Saga: s.Saga, Started: s.Started, LastType: s.LastType,
				LastAt: last, Events: s.Events, DeadLetters: s.DeadLetters, Seen: len(group), Indexed: indexed, Expected: []string{}}
			if s.Status == StatusCompleted {
				r.Ended = &s.Ended
			}
			if w := s.Waiting; w != nil {
				r.Deadline, r.Step, r.Expected, r.Service = &w.Deadline, w.Step, w.Expected, w.Service
				r.AfterTopic, r.AfterPartition, r.AfterOffset = w.After.Topic, w.After.Partition, w.After.Offset
			}
			sums = append(sums, r)
		}
	}
	t.queueFlowRows(b, flows)
	if len(sums) == 0 {
		return nil, nil
	}
	doc, err := json.Marshal(sums)
	if err != nil {
		return nil, fmt.Errorf("tracker: summarize: %w", err)
	}
	// One statement for the whole batch: the rows travel as one JSON array.
	b.Queue(`INSERT INTO `+t.sagasTable()+` AS s (`+summaryCols+`)
		SELECT `+summaryCols+` FROM jsonb_to_recordset($1::jsonb) AS r(correlation_id text, saga text,
			started timestamptz, ended timestamptz, last_type text, last_at timestamptz, events integer,
			dead_letters integer, seen integer, deadline timestamptz, step text, expected text[], service text,
			after_topic text, after_partition integer, after_offset bigint, indexed timestamptz)
		ON CONFLICT (correlation_id, saga) DO UPDATE SET started = excluded.started, ended = excluded.ended,
		last_type = excluded.last_type, last_at = excluded.last_at, events = excluded.events,
		dead_letters = excluded.dead_letters, seen = excluded.seen, deadline = excluded.deadline,
		step = excluded.step, expected = excluded.expected, service = excluded.service,
		after_topic = excluded.after_topic, after_partition = excluded.after_partition,
		after_offset = excluded.after_offset, indexed = excluded.indexed
		WHERE (s.indexed, s.seen) <= (excluded.indexed, excluded.seen)`, string(doc))
	return sums, nil
}

const summaryCols = `correlation_id, saga, started, ended, last_type, last_at, events, dead_letters, seen,
	deadline, step, expected, service, after_topic, after_partition, after_offset, indexed`

// summaryRow is one saga summary as queueSummaries sends it. Its times come from the
// index, so they have microsecond precision, as Postgres keeps them.
type summaryRow struct {
	CorrelationID  string     `json:"correlation_id"`
	Saga           string     `json:"saga"`
	Started        time.Time  `json:"started"`
	Ended          *time.Time `json:"ended"`
	LastType       string     `json:"last_type"`
	LastAt         time.Time  `json:"last_at"`
	Events         int        `json:"events"`
	DeadLetters    int        `json:"dead_letters"`
	Seen           int        `json:"seen"`
	Deadline       *time.Time `json:"deadline"`
	Step           string     `json:"step"`
	Expected       []string   `json:"expected"`
	Service        string     `json:"service"`
	AfterTopic     string     `json:"after_topic"`
	AfterPartition int32      `json:"after_partition"`
	AfterOffset    int64      `json:"after_offset"`
	Indexed        time.Time  `json:"indexed"` // the latest indexed_at of the rows it was computed from
}

// queueTypes queues the upsert of the latest producer of each event type in entries.
func (t *Tracker) queueTypes(b *pgx.Batch, entries []entry) {
	latest := map[string]entry{}
	for _, e := range entries {
		if e.dead || e.source == "" {
			continue
		}
		if l, ok := latest[e.typ]; !ok || e.at.After(l.at) {
			latest[e.typ] = e
		}
	}
	q := `INSERT INTO ` + t.typesTable() + ` AS y (type, source, last_seen) VALUES ($1, $2, $3)
		ON CONFLICT (type) DO UPDATE SET source = excluded.source, last_seen = excluded.last_seen
		WHERE y.last_seen <= excluded.last_seen`
	for _, typ := range slices.Sorted(maps.Keys(latest)) { // a stable lock order across instances
		e := latest[typ]
		b.Queue(q, e.typ, e.source, e.at)
	}
}

// Rebuild recomputes every saga's summary, every event's place in the flow (with the
// flow's tallies) and the producers of every event type from the index, in batches of
// correlation ids, and records the declarations and format it rebuilt for. Run calls it
// on start when RebuildNeeded says so, so summaries follow the current declarations (a
// step added, a window changed) and an index filled by a version without summaries or
// flow rows gets them.
func (t *Tracker) Rebuild(ctx context.Context) error {
	fingerprint, err := t.Fingerprint()
	if err != nil {
		return err
	}
	// Until it is done, the index is rebuilt for nothing: an interrupted rebuild is redone.
	if err := t.markRebuilt(ctx, ""); err != nil {
		return err
	}
	if err := t.rebuild(ctx); err != nil {
		return err
	}
	return t.markRebuilt(ctx, fingerprint)
}

// rebuild is Rebuild's recomputation.
func (t *Tracker) rebuild(ctx context.Context) error {
	const page = 500
	if _, err := t.db.Exec(ctx, `INSERT INTO `+t.typesTable()+` AS y (type, source, last_seen)
		SELECT DISTINCT ON (type) type, source, event_time FROM `+t.table+`
		WHERE NOT dead_letter AND source <> '' ORDER BY type, event_time DESC
		ON CONFLICT (type) DO UPDATE SET source = excluded.source, last_seen = excluded.last_seen
		WHERE y.last_seen <= excluded.last_seen`); err != nil {
		return fmt.Errorf("tracker: rebuild: types: %w", err)
	}
	if err := t.rebuildVersions(ctx); err != nil {
		return err
	}
	after := ""
	for {
		rows, err := t.db.Query(ctx, `SELECT DISTINCT correlation_id FROM `+t.table+
			` WHERE correlation_id > $1 ORDER BY correlation_id LIMIT $2`, after, page)
		if err != nil {
			return fmt.Errorf("tracker: rebuild: %w", err)
		}
		corrs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("tracker: rebuild: %w", err)
		}
		if len(corrs) == 0 {
			return nil
		}
		err = t.sendBatch(ctx, "rebuild", func(b *pgx.Batch) error {
			_, err := t.queueSummaries(ctx, b, corrs, nil)
			return err
		})
		if err != nil {
			return err
		}
		after = corrs[len(corrs)-1]
	}
}

// groupByCorrelation yields the runs of entries (sorted by correlation id) that share one.
func groupByCorrelation(entries []entry) func(yield func([]entry) bool) {
	return func(yield func([]entry) bool) {
		for i := 0; i < len(entries); {
			j := i + 1
			for j < len(entries) && entries[j].corr == entries[i].corr {
				j++
			}
			if !yield(entries[i:j]) {
				return
			}
			i = j
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
