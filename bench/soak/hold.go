package main

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// heldDB is one database's held snapshot.
type heldDB struct {
	Database string `json:"database"` // the service (or tracker) whose database it is
	PID      int32  `json:"backend_pid"`
	Xmin     int64  `json:"backend_xmin"`
	// XminAge is age(backend_xmin) just before the release: how many transaction ids
	// the snapshot held vacuum's horizon back by.
	XminAge int64 `json:"xmin_age_at_release"`
}

// snapshotHold is a REPEATABLE READ transaction open on each of a set of databases.
type snapshotHold struct {
	conns map[string]*pgx.Conn
	DBs   []heldDB
}

// holdSnapshots opens a connection to each database of urls (by name), begins a
// REPEATABLE READ transaction on it and takes its snapshot with a first query, which
// reads the backend's own backend_xmin from pg_stat_activity (an error if none is held).
// The connections then stay idle in transaction until release: since Postgres 14 the
// xmin horizon is per database, so a snapshot held on one database holds back
// vacuum of that database only, hence one per database.
func holdSnapshots(ctx context.Context, urls map[string]string) (h *snapshotHold, err error) {
	h = &snapshotHold{conns: map[string]*pgx.Conn{}}
	defer func() {
		if err != nil {
			h.release(context.WithoutCancel(ctx))
			h = nil
		}
	}()
	names := make([]string, 0, len(urls))
	for name := range urls {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		conn, err := pgx.Connect(ctx, urls[name])
		if err != nil {
			return nil, fmt.Errorf("soak: hold %s: %w", name, err)
		}
		h.conns[name] = conn
		// The server's or database's idle_in_transaction_session_timeout would end the hold.
		if _, err := conn.Exec(ctx, "SET idle_in_transaction_session_timeout = 0"); err != nil {
			return nil, fmt.Errorf("soak: hold %s: %w", name, err)
		}
		if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
			return nil, fmt.Errorf("soak: hold %s: %w", name, err)
		}
		d := heldDB{Database: name}
		var xmin *int64
		if err := conn.QueryRow(ctx, `SELECT pid, backend_xmin::text::bigint FROM pg_stat_activity WHERE pid = pg_backend_pid()`).
			Scan(&d.PID, &xmin); err != nil {
			return nil, fmt.Errorf("soak: hold %s: %w", name, err)
		}
		if xmin == nil {
			return nil, fmt.Errorf("soak: hold %s: the transaction holds no backend_xmin", name)
		}
		d.Xmin = *xmin
		h.DBs = append(h.DBs, d)
	}
	return h, nil
}

// release reads each held snapshot's xmin age, then rolls its transaction back and
// closes its connection.
func (h *snapshotHold) release(ctx context.Context) error {
	var errs []error
	for i, d := range h.DBs {
		if conn := h.conns[d.Database]; conn != nil {
			if err := conn.QueryRow(ctx, `SELECT age(backend_xmin) FROM pg_stat_activity WHERE pid = $1`, d.PID).
				Scan(&h.DBs[i].XminAge); err != nil {
				errs = append(errs, fmt.Errorf("soak: hold %s: %w", d.Database, err))
			}
		}
	}
	for name, conn := range h.conns {
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			errs = append(errs, fmt.Errorf("soak: release %s: %w", name, err))
		}
		if err := conn.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("soak: release %s: %w", name, err))
		}
		delete(h.conns, name)
	}
	return errors.Join(errs...)
}
