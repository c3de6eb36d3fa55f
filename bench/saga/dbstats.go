package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// dbCounters is one snapshot of a service database's cumulative statistics:
// pg_stat_database's transactions and pg_stat_user_tables' rows written per table.
type dbCounters struct {
	commits, rollbacks int64
	tables             map[string][3]int64 // table -> inserted, updated, deleted rows
}

// dbAccount is what a service's database did during one rate (window and drain),
// per order of the rate: transactions committed and rows written, per table.
type dbAccount struct {
	CommitsPerOrder   float64               `json:"commits_per_order"`
	RollbacksPerOrder float64               `json:"rollbacks_per_order"`
	RowsPerOrder      map[string][3]float64 `json:"rows_per_order"` // table -> inserted, updated, deleted
	Totals            map[string][3]int64   `json:"rows"`
	Commits           int64                 `json:"commits"`
	Orders            int                   `json:"orders"`
	Seconds           float64               `json:"seconds"`
}

// dbStats snapshots the statistics of each service's database over a connection of
// its own (pg_stat_user_tables is per database).
type dbStats struct {
	conns map[string]*pgx.Conn // service -> connection to its database
}

func newDBStats(ctx context.Context, dsn string, databases map[string]string) (*dbStats, error) {
	s := &dbStats{conns: map[string]*pgx.Conn{}}
	for svc, db := range databases {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("saga: postgres: %w", err)
		}
		cfg.Database = db
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("saga: postgres %s: %w", db, err)
		}
		s.conns[svc] = c
	}
	return s, nil
}

func (s *dbStats) close() {
	for _, c := range s.conns {
		_ = c.Close(context.Background())
	}
}

// snapshot reads every database's counters. Backends report their counters at most
// once a second (Postgres 15), so take it a little after the work of interest ended.
func (s *dbStats) snapshot(ctx context.Context) map[string]dbCounters {
	out := map[string]dbCounters{}
	for svc, c := range s.conns {
		var dc dbCounters
		if err := c.QueryRow(ctx, `SELECT xact_commit, xact_rollback FROM pg_stat_database
			WHERE datname = current_database()`).Scan(&dc.commits, &dc.rollbacks); err != nil {
			continue
		}
		rows, err := c.Query(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables`)
		if err != nil {
			continue
		}
		dc.tables = map[string][3]int64{}
		var (
			name          string
			ins, upd, del int64
		)
		_, err = pgx.ForEachRow(rows, []any{&name, &ins, &upd, &del}, func() error {
			dc.tables[name] = [3]int64{ins, upd, del}
			return nil
		})
		if err == nil {
			out[svc] = dc
		}
	}
	return out
}

// walCounters is one snapshot of the cluster's pg_stat_wal: WAL records written and
// WAL flushes (fsyncs, by backends and the WAL writer). They are cluster-wide: on the
// shared server they include every other database's traffic, so read them from a
// -statements run (a private cluster).
type walCounters struct{ records, syncs int64 }

// walAccount is what the cluster's WAL did during one rate (window and drain), per order created.
type walAccount struct {
	RecordsPerOrder float64 `json:"records_per_order"`
	SyncsPerOrder   float64 `json:"syncs_per_order"`
	Syncs           int64   `json:"syncs"`
	Private         bool    `json:"private_cluster"` // false: other databases' traffic included
}

// wal reads pg_stat_wal over any of the connections; ok is false if it cannot.
func (s *dbStats) wal(ctx context.Context) (w walCounters, ok bool) {
	for _, c := range s.conns {
		err := c.QueryRow(ctx, "SELECT wal_records, wal_sync FROM pg_stat_wal").Scan(&w.records, &w.syncs)
		return w, err == nil
	}
	return w, false
}

// accountWAL turns two WAL snapshots into per-order figures.
func accountWAL(before, after walCounters, orders int, private bool) *walAccount {
	n := float64(max(orders, 1))
	return &walAccount{RecordsPerOrder: float64(after.records-before.records) / n,
		SyncsPerOrder: float64(after.syncs-before.syncs) / n, Syncs: after.syncs - before.syncs, Private: private}
}

// account turns two snapshots into per-order figures for orders orders.
func account(before, after map[string]dbCounters, orders int, d time.Duration) map[string]dbAccount {
	out := map[string]dbAccount{}
	n := float64(max(orders, 1))
	for svc, a := range after {
		b, ok := before[svc]
		if !ok {
			continue
		}
		acc := dbAccount{Commits: a.commits - b.commits, Orders: orders, Seconds: d.Seconds(),
			RowsPerOrder: map[string][3]float64{}, Totals: map[string][3]int64{}}
		acc.CommitsPerOrder = float64(acc.Commits) / n
		acc.RollbacksPerOrder = float64(a.rollbacks-b.rollbacks) / n
		for _, t := range slices.Sorted(maps.Keys(a.tables)) {
			x, y := a.tables[t], b.tables[t]
			delta := [3]int64{x[0] - y[0], x[1] - y[1], x[2] - y[2]}
			if delta == ([3]int64{}) {
				continue
			}
			acc.Totals[t] = delta
			acc.RowsPerOrder[t] = [3]float64{float64(delta[0]) / n, float64(delta[1]) / n, float64(delta[2]) / n}
		}
		out[svc] = acc
	}
	return out
}
