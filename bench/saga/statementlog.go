package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The private cluster of -statements writes its log as CSV (logging_collector, csvlog)
// into its data directory; the run turns log_statement on while it records the services'
// statements with their parameters, and off again.

// statementLogSettings are the cluster settings that make the log readable here.
var statementLogSettings = [][2]string{
	{"logging_collector", "on"},
	{"log_destination", "csvlog"},
	{"log_filename", "saga.log"}, // csvlog writes saga.csv
	{"log_rotation_size", "0"},
}

// setStatementLogging turns logging every statement with its parameters on or off on the
// whole cluster (every existing session follows the reload).
func setStatementLogging(ctx context.Context, admin *pgxpool.Pool, on bool) error {
	v := "none"
	if on {
		v = "all"
	}
	if _, err := admin.Exec(ctx, "ALTER SYSTEM SET log_statement = '"+v+"'"); err != nil {
		return fmt.Errorf("saga: log_statement: %w", err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("saga: reload: %w", err)
	}
	return nil
}

// statementLogOffset returns the cluster's CSV log file and its current size, so that a
// later read starts where the recording does.
func statementLogOffset(ctx context.Context, admin *pgxpool.Pool) (string, int64, error) {
	var dir, file string
	err := admin.QueryRow(ctx, "SELECT current_setting('data_directory'), coalesce(pg_current_logfile('csvlog'), '')").Scan(&dir, &file)
	if err != nil {
		return "", 0, fmt.Errorf("saga: log file: %w", err)
	}
	if file == "" {
		return "", 0, errors.New("saga: the cluster writes no CSV log")
	}
	if !filepath.IsAbs(file) {
		file = filepath.Join(dir, file)
	}
	st, err := os.Stat(file)
	if err != nil {
		return "", 0, fmt.Errorf("saga: log file: %w", err)
	}
	return file, st.Size(), nil
}

// CSV log columns (PostgreSQL 13 and later).
const (
	csvDatabase = 2
	csvSession  = 5
	csvVXID     = 9
	csvMessage  = 13
	csvDetail   = 14
)

// readStatementLog reads the statements logged from offset on, grouped into transactions
// per database in the order they began. Statements of other databases, and the harness's
// own queries of statistics views, are left out.
func readStatementLog(path string, offset int64, databases map[string]string) (map[string][]recordedTx, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("saga: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, fmt.Errorf("saga: %w", err)
	}
	svcOf := map[string]string{}
	for svc, db := range databases {
		svcOf[db] = svc
	}
	type txKey struct{ session, vxid string }
	open := map[txKey]*recordedTx{}
	out := map[string][]*recordedTx{}
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("saga: %s: %w", path, err)
		}
		if len(rec) <= csvDetail {
			continue
		}
		svc, ok := svcOf[rec[csvDatabase]]
		if !ok {
			continue
		}
		q, ok := loggedQuery(rec[csvMessage])
		if !ok || strings.Contains(q, "pg_stat") {
			continue
		}
		params, err := parseLogParams(rec[csvDetail])
		if err != nil {
			return nil, fmt.Errorf("saga: %s: %w", path, err)
		}
		k := txKey{rec[csvSession], rec[csvVXID]}
		tx := open[k]
		if tx == nil {
			tx = &recordedTx{}
			open[k] = tx
			out[svc] = append(out[svc], tx)
		}
		tx.Stmts = append(tx.Stmts, recordedStmt{Query: q, Params: params})
	}
	res := map[string][]recordedTx{}
	for svc, txs := range out {
		for _, tx := range txs {
			res[svc] = append(res[svc], *tx)
		}
	}
	return res, nil
}

// loggedQuery returns the query of a log_statement message: "statement: Q" (simple
// protocol) or "execute NAME: Q" (extended protocol).
func loggedQuery(msg string) (string, bool) {
	if q, ok := strings.CutPrefix(msg, "statement: "); ok {
		return q, true
	}
	if rest, ok := strings.CutPrefix(msg, "execute "); ok {
		if _, q, ok := strings.Cut(rest, ": "); ok {
			return q, true
		}
	}
	return "", false
}
