package testenv

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TableText returns every row of table as text, in a stable order: two tables (or one
// before and after) compare row for row.
func TableText(t testing.TB, db *pgxpool.Pool, table string) []string {
	t.Helper()
	return QueryText(t, db, `SELECT x::text FROM `+table+` x ORDER BY 1`)
}

// QueryText returns the one text column of q's rows.
func QueryText(t testing.TB, db *pgxpool.Pool, q string) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}
