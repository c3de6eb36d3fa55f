package tracker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// fullRetainEvery is how often a retention pass reads a table from its first row instead
// of from the cutoff of the pass before (its floor): every tenth pass.
const fullRetainEvery = 10

// retainFloors remembers, per table, the cutoff below which the last completed retention
// pass deleted every row, so that the next pass reads the table from there. A pass that
// read from the first row would walk, while any transaction on the server holds a
// snapshot, the index entries of every row retention has deleted since (vacuum cannot
// remove them): each batch would cost more than the one before. Rows that arrive below a
// floor (an event indexed late, with an old event time) are left to the full pass, every
// fullRetainEvery passes; a process starts with one.
type retainFloors struct {
	mu     sync.Mutex
	floors map[string]time.Time
	passes int
}

// from returns where this pass reads table from: its floor, or the zero time (every row)
// on a full pass.
func (f *retainFloors) from(table string, full bool) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if full {
		return time.Time{}
	}
	return f.floors[table]
}

// done records that a pass deleted every row of table below cutoff.
func (f *retainFloors) done(table string, cutoff time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.floors == nil {
		f.floors = map[string]time.Time{}
	}
	f.floors[table] = cutoff
}

// pass counts a retention pass and says whether it is a full one (the first, then every
// fullRetainEvery).
func (f *retainFloors) pass() (full bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	full = f.passes%fullRetainEvery == 0
	f.passes++
	return full
}

// Retain deletes indexed events older than the retention age, the summaries of sagas
// whose every record is older, the flow rows of those events with their share of the
// flow's tallies, and the rejected records (Rejected) and contract violations recorded
// before then, in batches of at most the retention batch size. Each table is read from
// where the last pass left it (a full pass every tenth, for rows indexed late with an old
// time). It returns how many events it deleted.
func (t *Tracker) Retain(ctx context.Context) (int64, error) {
	cutoff := t.now().Add(-t.retention)
	full := t.floors.pass()
	total, err := t.deleteBatches(ctx, t.table, "event_time", cutoff, full)
	if err != nil {
		return total, err
	}
	if _, err = t.deleteBatches(ctx, t.sagasTable(), "last_at", cutoff, full); err != nil {
		return total, err
	}
	if _, err = t.deleteBatches(ctx, t.rejectedTable(), "at", cutoff, full); err != nil {
		return total, err
	}
	if _, err = t.deleteBatches(ctx, t.violationsTable(), "at", cutoff, full); err != nil {
		return total, err
	}
	// The flow rows' triggers take them off the tallies, deleting the tallies they empty;
	// the tallies of earlier minutes go too, whatever is left of them.
	if _, err = t.deleteBatches(ctx, t.flowEventsTable(), "event_time", cutoff, full); err != nil {
		return total, err
	}
	minute := cutoff.UTC().Truncate(time.Minute)
	if _, err = t.deleteBatches(ctx, t.flowEdgesTable(), "minute", minute, full); err != nil {
		return total, err
	}
	_, err = t.deleteBatches(ctx, t.flowNodesTable(), "minute", minute, full)
	return total, err
}

// deleteBatches deletes the rows of table whose column is before cutoff, batch by batch
// in column order, each batch reading from where the one before stopped (the rows it
// deleted stay in the index while a snapshot can see them) and the first from the table's
// floor (the zero time on a full pass).
func (t *Tracker) deleteBatches(ctx context.Context, table, column string, cutoff time.Time, full bool) (int64, error) {
	q := `WITH d AS (DELETE FROM ` + table + ` WHERE ctid IN (SELECT ctid FROM ` + table +
		` WHERE ` + column + ` >= $1 AND ` + column + ` < $2 ORDER BY ` + column + ` LIMIT $3) RETURNING ` + column +
		`) SELECT count(*), max(` + column + `) FROM d`
	from := t.floors.from(table, full)
	var total int64
	for {
		var (
			n    int64
			last *time.Time
		)
		rows, err := t.db.Query(ctx, q, from, cutoff, t.batch)
		if err == nil {
			_, err = pgx.ForEachRow(rows, []any{&n, &last}, func() error { return nil })
		}
		if err != nil {
			return total, fmt.Errorf("tracker: retention of %s: %w", table, err)
		}
		total += n
		if n < int64(t.batch) {
			t.floors.done(table, cutoff)
			return total, nil
		}
		from = *last
	}
}
