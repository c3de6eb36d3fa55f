package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// fullReadInterval is how often a read starts from the table's first row even though the
// floor is above it: a safety net for a row whose id was drawn outside the id column's
// default, which the floor's reasoning does not cover.
const fullReadInterval = time.Minute

// floor is the id the leader's reads start after. Every id at or below it is final (its
// transaction has ended) and no longer in the table, so no row can appear there: a read
// that starts past it misses nothing and keeps per-key order, and it does not walk the
// index entries of the rows published and deleted below it, which stay while a long
// transaction elsewhere (a backup, an analytics query, a forgotten session) holds back
// vacuum.
//
// Ids are drawn at insert and become visible at commit, so the floor moves in two steps,
// each at most once per interval. A barrier records the sequence's last value and the
// transactions then holding the table's RowExclusiveLock (an INSERT takes it before it
// draws an id, and keeps it until its transaction ends). Once none of them holds it any
// more, every id up to that last value is final; the floor then moves up to it, or to just
// below the lowest of those ids still in the table (waiting to be published), and a new
// barrier is set.
type floor struct {
	after    int64         // reads start past this id
	every    time.Duration // how often the floor moves (0: never, every read starts at the first row)
	sequence uint32        // the id column's sequence (0: not known, the floor stays at 0)
	table    uint32        // the outbox table
	next     time.Time     // when the floor may move next
	fullRead time.Time     // when a read starts from the first row next
	barrier  *barrier      // set and not yet passed
}

// barrier is the sequence's last value and the transactions that could still commit an id
// at or below it.
type barrier struct {
	last    int64
	writers []string // virtual transaction ids
}

// newFloor returns the floor of a new leadership term, at 0. It looks up the id column's
// sequence; when there is none, or it caches values per session (which could hand out an
// id below its last value later), the floor stays at 0.
func (r *Relay) newFloor(ctx context.Context, conn *pgx.Conn) (*floor, error) {
	f := &floor{every: r.cfg.floorInterval}
	if f.every <= 0 {
		return f, nil
	}
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	var seq, table *uint32
	var cache *int64
	err := conn.QueryRow(qctx, `SELECT s.seqrelid::oid, $1::regclass::oid, s.seqcache
		FROM (SELECT pg_get_serial_sequence($1, 'id')::regclass AS rel) AS q
		LEFT JOIN pg_sequence s ON s.seqrelid = q.rel`, r.names.table).Scan(&seq, &table, &cache)
	if err != nil {
		return nil, fmt.Errorf("outbox: look up the id sequence: %w", err)
	}
	if seq == nil || cache == nil || *cache != 1 {
		r.log.Warn("outbox relay: the id column has no sequence drawing one value at a time; every read starts from the table's first row",
			"outbox_table", r.names.table)
		return f, nil
	}
	// Reading the sequence needs USAGE or SELECT on it, which inserting through the
	// identity column does not: a role without it keeps the floor at 0.
	if _, err := conn.Exec(qctx, "SELECT pg_sequence_last_value($1::oid::regclass)", *seq); err != nil {
		r.log.Warn("outbox relay: cannot read the id sequence (grant SELECT on it to the relay's role); every read starts from the table's first row",
			"outbox_table", r.names.table, "err", err)
		return f, nil
	}
	f.sequence, f.table = *seq, *table
	f.fullRead = time.Now().Add(fullReadInterval)
	return f, nil
}

// start returns the id the next read starts after: the floor, or 0 when a full read is due.
func (f *floor) start(now time.Time) int64 {
	if f.after == 0 || now.Before(f.fullRead) {
		return f.after
	}
	f.fullRead = now.Add(fullReadInterval)
	return 0
}

// moveFloor passes the pending barrier once its writers have ended (moving the floor) and sets
// the next one, at most once per interval.
func (r *Relay) moveFloor(ctx context.Context, conn *pgx.Conn, f *floor, now time.Time) error {
	if f.sequence == 0 || now.Before(f.next) {
		return nil
	}
	f.next = now.Add(f.every)
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), queryTimeout)
	defer cancel()
	if b := f.barrier; b != nil {
		var waiting bool
		if err := conn.QueryRow(qctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE relation = $1::oid AND mode = 'RowExclusiveLock'
			AND granted AND virtualtransaction = ANY($2))`, f.table, b.writers).Scan(&waiting); err != nil {
			return fmt.Errorf("outbox: read floor: %w", err)
		}
		if waiting {
			return nil
		}
		var after int64
		if err := conn.QueryRow(qctx, "SELECT coalesce(min(id) - 1, $2) FROM "+r.names.table+" WHERE id > $1 AND id <= $2",
			f.after, b.last).Scan(&after); err != nil {
			return fmt.Errorf("outbox: read floor: %w", err)
		}
		f.after = max(f.after, after)
	}
	// The last value first: a transaction that drew an id up to it did so holding the
	// lock, which it still holds when the lock table is read unless it has ended.
	b := &barrier{}
	if err := conn.QueryRow(qctx, "SELECT coalesce(pg_sequence_last_value($1::oid::regclass), 0)", f.sequence).Scan(&b.last); err != nil {
		return fmt.Errorf("outbox: read floor: %w", err)
	}
	if err := conn.QueryRow(qctx, `SELECT coalesce(array_agg(virtualtransaction), '{}') FROM pg_locks
		WHERE relation = $1::oid AND mode = 'RowExclusiveLock' AND granted AND pid <> pg_backend_pid()`, f.table).Scan(&b.writers); err != nil {
		return fmt.Errorf("outbox: read floor: %w", err)
	}
	f.barrier = b
	return nil
}

// belowFloor reports the rows of a full read (one started at 0) at or below the floor: rows
// that should not exist there. They are published like any other; the warning says per-key
// order may not have held for them.
func (r *Relay) belowFloor(f *floor, from int64, rows []row) {
	if from != 0 || f.after == 0 || len(rows) == 0 || rows[0].id > f.after {
		return
	}
	r.log.Warn("outbox relay: rows committed at or below the read floor (an id drawn outside the id column's default?); publishing them now, per-key order may not have held for them",
		"outbox_table", r.names.table, "id", rows[0].id, "floor", f.after)
}
