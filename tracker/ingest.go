package tracker

import (
	"context"
	"fmt"
	"time"
)

// insert writes entries with one INSERT … SELECT FROM unnest(…) ON CONFLICT DO NOTHING and
// returns those it added (a position already indexed, in the table or earlier in entries,
// adds nothing).
func (t *Tracker) insert(ctx context.Context, entries []entry) ([]entry, error) {
	n := len(entries)
	var (
		topics, corrs, ids, types, sources []string
		subjects, traces, causes           []string
		reasons, errTexts                  []string
		parts, versions                    []int32
		offsets                            []int64
		times                              []time.Time
		dead                               []bool
	)
	at := make(map[position]int, n)
	for i, e := range entries {
		topics, parts, offsets = append(topics, e.topic), append(parts, e.partition), append(offsets, e.offset)
		corrs, ids, types = append(corrs, e.corr), append(ids, e.id), append(types, e.typ)
		sources, subjects, times = append(sources, e.source), append(subjects, e.subject), append(times, e.at)
		traces, causes, dead = append(traces, e.traceID), append(causes, e.causation), append(dead, e.dead)
		reasons, errTexts = append(reasons, e.reason), append(errTexts, e.errText)
		versions = append(versions, int32(e.version))
		if _, dup := at[position{e.topic, e.partition, e.offset}]; !dup {
			at[position{e.topic, e.partition, e.offset}] = i
		}
	}
	rows, err := t.db.Query(ctx, `INSERT INTO `+t.table+` (topic, partition, "offset", correlation_id,
		event_id, type, source, subject, event_time, trace_id, causation_id, dead_letter, dlq_reason, dlq_error,
		schema_version)
		SELECT * FROM unnest($1::text[], $2::integer[], $3::bigint[], $4::text[], $5::text[], $6::text[],
			$7::text[], $8::text[], $9::timestamptz[], $10::text[], $11::text[], $12::boolean[], $13::text[], $14::text[],
			$15::integer[])
		ON CONFLICT (topic, partition, "offset") DO NOTHING
		RETURNING topic, partition, "offset"`,
		topics, parts, offsets, corrs, ids, types, sources, subjects, times, traces, causes, dead, reasons, errTexts,
		versions)
	if err != nil {
		return nil, fmt.Errorf("tracker: index %d records: %w", n, err)
	}
	defer rows.Close()
	var fresh []entry
	for rows.Next() {
		var p position
		if err := rows.Scan(&p.topic, &p.partition, &p.offset); err != nil {
			return nil, fmt.Errorf("tracker: index: %w", err)
		}
		fresh = append(fresh, entries[at[p]])
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tracker: index %d records: %w", n, err)
	}
	return fresh, nil
}
