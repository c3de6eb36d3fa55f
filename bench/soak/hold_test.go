package main

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/choreo-saga/choreo/internal/testenv"
)

// TestHoldSnapshots: a held snapshot stays idle in transaction with a backend_xmin,
// keeps VACUUM from removing the rows deleted while it is held, reports how far the
// transaction ids moved on at the release, and once released lets VACUUM remove them.
func TestHoldSnapshots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := testenv.PostgresDSN(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	notDead := regexp.MustCompile(`(\d+) are dead but not yet removable`)
	var kept int
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if m := notDead.FindStringSubmatch(n.Message); m != nil {
			kept, _ = strconv.Atoi(m[1])
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 1000)`); err != nil {
		t.Fatal(err)
	}

	h, err := holdSnapshots(ctx, map[string]string{"order": dsn})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.DBs) != 1 || h.DBs[0].Database != "order" || h.DBs[0].Xmin == 0 {
		t.Fatalf("held %+v", h.DBs)
	}
	var state string
	if err := conn.QueryRow(ctx, `SELECT state FROM pg_stat_activity WHERE pid = $1 AND backend_xmin IS NOT NULL`, h.DBs[0].PID).
		Scan(&state); err != nil || state != "idle in transaction" {
		t.Fatalf("held backend: state %q, %v; want idle in transaction with a backend_xmin", state, err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM t WHERE id <= 200`); err != nil {
		t.Fatal(err)
	}
	for range 5 { // transactions that take an id each
		if _, err := conn.Exec(ctx, `SELECT txid_current()`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, `VACUUM (VERBOSE) t`); err != nil {
		t.Fatal(err)
	}
	if kept != 200 {
		t.Errorf("VACUUM while held: %d dead rows kept, want the 200 deleted", kept)
	}

	if err := h.release(ctx); err != nil {
		t.Fatal(err)
	}
	if age := h.DBs[0].XminAge; age < 5 {
		t.Errorf("xmin age at release %d, want at least the 5 transactions since the hold", age)
	}
	// The held backend ends with its connection, shortly after the release returns.
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, h.DBs[0].PID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the released backend is still in pg_stat_activity")
		case <-time.After(50 * time.Millisecond):
		}
	}
	kept = -1
	if _, err := conn.Exec(ctx, `VACUUM (VERBOSE) t`); err != nil {
		t.Fatal(err)
	}
	if kept != 0 {
		t.Errorf("VACUUM after the release: %d dead rows kept, want 0", kept)
	}
}
