package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/testenv/pgcluster"
)

// statementsCluster creates a private Postgres cluster that loads pg_stat_statements
// (-statements), so that a run can count every statement the services send. The
// shared server is never restarted. The caller drops the cluster.
func statementsCluster(ctx context.Context) (*pgcluster.Cluster, error) {
	var id [4]byte
	_, _ = rand.Read(id[:])
	opts := []pgcluster.Option{
		pgcluster.WithSetting("shared_preload_libraries", "pg_stat_statements"),
		pgcluster.WithSetting("pg_stat_statements.track", "all"),
		pgcluster.WithSetting("max_connections", "500"), // -sweep 4: 12 processes' pools
	}
	for _, kv := range statementLogSettings {
		opts = append(opts, pgcluster.WithSetting(kv[0], kv[1]))
	}
	c, err := pgcluster.Create(ctx, "saga_statements_"+hex.EncodeToString(id[:]), opts...)
	if err != nil {
		return nil, fmt.Errorf("saga: -statements: %w", err)
	}
	conn, err := pgx.Connect(ctx, c.URL())
	if err == nil {
		_, err = conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
		_ = conn.Close(ctx)
	}
	if err != nil {
		c.Drop()
		return nil, fmt.Errorf("saga: -statements: %w", err)
	}
	return c, nil
}

// statementCount is one statement's calls and rows per order created, in one
// service's database.
type statementCount struct {
	Query string `json:"query"`
	// Nested: run by Postgres itself inside another statement (a foreign key's
	// check), not sent by the service.
	Nested        bool    `json:"nested,omitempty"`
	CallsPerOrder float64 `json:"calls_per_order"`
	RowsPerOrder  float64 `json:"rows_per_order"`
	MeanMs        float64 `json:"mean_exec_ms"`
}

func resetStatements(ctx context.Context, admin *pgxpool.Pool) {
	_, _ = admin.Exec(ctx, "SELECT pg_stat_statements_reset()")
}

// readStatements returns, per service, the statements its database ran since the last
// reset, per order created, most frequent first.
func readStatements(ctx context.Context, admin *pgxpool.Pool, databases map[string]string, orders int) map[string][]statementCount {
	out := map[string][]statementCount{}
	n := float64(max(orders, 1))
	for svc, db := range databases {
		rows, err := admin.Query(ctx, `SELECT s.query, NOT s.toplevel, sum(s.calls)::bigint, sum(s.rows)::bigint,
			sum(s.total_exec_time) / greatest(sum(s.calls), 1)
			FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
			WHERE d.datname = $1 GROUP BY s.query, s.toplevel ORDER BY 3 DESC`, db)
		if err != nil {
			continue
		}
		var (
			q          string
			nested     bool
			calls, rws int64
			meanMs     float64
			list       []statementCount
		)
		_, err = pgx.ForEachRow(rows, []any{&q, &nested, &calls, &rws, &meanMs}, func() error {
			list = append(list, statementCount{Query: strings.Join(strings.Fields(q), " "), Nested: nested,
				CallsPerOrder: float64(calls) / n, RowsPerOrder: float64(rws) / n, MeanMs: meanMs})
			return nil
		})
		if err == nil {
			out[svc] = list
		}
	}
	return out
}
