package tracker

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// never is a clock past every deadline: evaluating with it opens every unmet expectation,
// so the stored deadline is the earliest one whatever the time of the query.
var never = time.Unix(math.MaxInt32, 0)

// sagasTable and typesTable name the summary tables of the index table t.table.
func (t *Tracker) sagasTable() string { return t.table + "_sagas" }
func (t *Tracker) typesTable() string { return t.table + "_types" }

// sagaTotalsTable names the table of how many summaries of each kind sagasTable holds.
func (t *Tracker) sagaTotalsTable() string { return t.table + "_saga_totals" }

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
	t.queueSagas(b, sums)
	return sums, nil
}

// queueSagas queues the upsert of sums, sent as arrays in one statement (each row's
// expected types as one array literal, since arrays of arrays must be rectangular).
func (t *Tracker) queueSagas(b *pgx.Batch, sums []summaryRow) {
	n := len(sums)
	var (
		corrs, sagas, lastTypes, steps   = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		services, expected, afterTopics  = make([]string, n), make([]string, n), make([]string, n)
		started, lastAt, indexed         = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
		ended, deadlines                 = make([]*time.Time, n), make([]*time.Time, n)
		events, deadLetters, seen, parts = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
		offsets                          = make([]int64, n)
	)
	for i, r := range sums {
		corrs[i], sagas[i], lastTypes[i], steps[i] = r.CorrelationID, r.Saga, r.LastType, r.Step
		services[i], expected[i], afterTopics[i] = r.Service, arrayLiteral(r.Expected), r.AfterTopic
		started[i], lastAt[i], indexed[i], ended[i], deadlines[i] = r.Started, r.LastAt, r.Indexed, r.Ended, r.Deadline
		events[i], deadLetters[i], seen[i] = int32(r.Events), int32(r.DeadLetters), int32(r.Seen)
		parts[i], offsets[i] = r.AfterPartition, r.AfterOffset
	}
	b.Queue(`INSERT INTO `+t.sagasTable()+` AS s (`+summaryCols+`)
		SELECT correlation_id, saga, started, ended, last_type, last_at, events, dead_letters, seen,
			deadline, step, expected::text[], service, after_topic, after_partition, after_offset, indexed
		FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[], $5::text[], $6::timestamptz[],
			$7::integer[], $8::integer[], $9::integer[], $10::timestamptz[], $11::text[], $12::text[], $13::text[],
			$14::text[], $15::integer[], $16::bigint[], $17::timestamptz[]) AS r(`+summaryCols+`)
		ON CONFLICT (correlation_id, saga) DO UPDATE SET started = excluded.started, ended = excluded.ended,
		last_type = excluded.last_type, last_at = excluded.last_at, events = excluded.events,
		dead_letters = excluded.dead_letters, seen = excluded.seen, deadline = excluded.deadline,
		step = excluded.step, expected = excluded.expected, service = excluded.service,
		after_topic = excluded.after_topic, after_partition = excluded.after_partition,
		after_offset = excluded.after_offset, indexed = excluded.indexed
		WHERE (s.indexed, s.seen) <= (excluded.indexed, excluded.seen)`,
		corrs, sagas, started, ended, lastTypes, lastAt, events, deadLetters, seen, deadlines, steps, expected,
		services, afterTopics, parts, offsets, indexed)
}

// arrayLiteral writes ss as a Postgres array literal, every element quoted.
func arrayLiteral(ss []string) string {
	var sb strings.Builder
	sb.WriteByte('{')
	for i, s := range ss {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteByte('"')
		for _, c := range []byte(s) {
			if c == '"' || c == '\\' {
				sb.WriteByte('\\')
			}
			sb.WriteByte(c)
		}
		sb.WriteByte('"')
	}
	sb.WriteByte('}')
	return sb.String()
}

const summaryCols = `correlation_id, saga, started, ended, last_type, last_at, events, dead_letters, seen,
	deadline, step, expected, service, after_topic, after_partition, after_offset, indexed`

// summaryRow is one saga summary as queueSummaries sends it. Its times come from the
// index, so they have microsecond precision, as Postgres keeps them.
type summaryRow struct {
	CorrelationID  string
	Saga           string
	Started        time.Time
	Ended          *time.Time
	LastType       string
	LastAt         time.Time
	Events         int
	DeadLetters    int
	Seen           int
	Deadline       *time.Time
	Step           string
	Expected       []string
	Service        string
	AfterTopic     string
	AfterPartition int32
	AfterOffset    int64
	Indexed        time.Time // the latest indexed_at of the rows it was computed from
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
