// Package migrate applies the numbered migrations of the library's Postgres tables and
// records which versions each table has.
//
// A component is one table (or a table with its sibling) of one kind: "idempotency",
// "outbox", "lock_fences" or "dead_letters". Its migrations are numbered from 1; version 1
// is the schema every release before versioning created, written with IF NOT EXISTS, so
// a database that has the tables but no version rows is upgraded by recording it. Later
// versions must be safe to re-run too (ADD COLUMN IF NOT EXISTS, …), because users who
// run the exported SQL with their own tool have no version rows.
//
// Apply runs, in one transaction holding one transaction-scoped advisory lock (LockKey,
// shared by every choreo migration), every step of every component newer than the
// version recorded in the choreo_schema_migrations table, and records each one. A step
// that fails rolls back everything the call did. Concurrent callers serialise on the
// lock; the second finds the versions recorded and applies nothing.
package migrate

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/internal/sqlname"
)

// LockKey is the transaction-scoped advisory lock every choreo migration holds: the
// ASCII bytes of "choreoMG".
const LockKey int64 = 0x63686f72656f4d47

// VersionsTable records the applied versions. It is created, unqualified, in the first
// schema of the connection's search_path.
const VersionsTable = "choreo_schema_migrations"

const versionsSQL = `CREATE TABLE IF NOT EXISTS ` + VersionsTable + ` (
    component  text        NOT NULL,  -- kind:schema.table, e.g. idempotency:public.choreo_idempotency
    version    integer     NOT NULL CHECK (version >= 1),
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (component, version)
)`

// ErrNoSchema is returned when the connection's search_path names no existing schema,
// so there is nowhere to create unqualified tables.
var ErrNoSchema = errors.New("migrate: search_path names no existing schema")

// DB begins transactions; *pgxpool.Pool, *pgx.Conn and pgx.Tx (a savepoint) satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Querier runs queries; *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Component is the migrations of one table.
type Component struct {
	kind  string
	table sqlname.Name
	steps []string // SQL of version i+1
}

// SQL returns every step in version order, each after a "-- kind version N" line: the
// script for users' own migration tools. It takes no lock and records no version.
func (c Component) SQL() string {
	var b strings.Builder
	for i, s := range c.steps {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "-- choreo migration: %s version %d\n%s", c.kind, i+1, s)
	}
	return b.String()
}

// key returns the component's name in VersionsTable: kind:schema.table, with an
// unqualified table resolved to schema, the first schema of the search_path.
func (c Component) key(schema string) string {
	s := c.table.Schema()
	if s == "" {
		s = schema
	}
	return c.kind + ":" + s + "." + c.table.Table()
}

// Apply brings every component to its newest version (see the package documentation).
func Apply(ctx context.Context, db DB, comps ...Component) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", LockKey); err != nil {
			return fmt.Errorf("advisory lock: %w", err)
		}
		var schema *string
		if err := tx.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
			return err
		}
		if schema == nil {
			return ErrNoSchema
		}
		if _, err := tx.Exec(ctx, versionsSQL); err != nil {
			return fmt.Errorf("create %s: %w", VersionsTable, err)
		}
		for _, c := range comps {
			key := c.key(*schema)
			var have int
			err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+VersionsTable+" WHERE component = $1", key).Scan(&have)
			if err != nil {
				return fmt.Errorf("%s: read version: %w", key, err)
			}
			// A database migrated by a newer release (have > len) is left alone: its
			// versions must stay compatible with older instances during a rolling deploy.
			for v := have + 1; v <= len(c.steps); v++ {
				// No arguments: pgx sends the step with the simple protocol, so it may
				// hold several statements.
				if _, err := tx.Exec(ctx, c.steps[v-1]); err != nil {
					return fmt.Errorf("%s: version %d: %w", key, v, err)
				}
				if _, err := tx.Exec(ctx, "INSERT INTO "+VersionsTable+" (component, version) VALUES ($1, $2)", key, v); err != nil {
					return fmt.Errorf("%s: record version %d: %w", key, v, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// Version is one applied migration.
type Version struct {
	Component string // kind:schema.table
	Version   int
	AppliedAt time.Time
}

// Versions returns every applied migration recorded in the search_path's VersionsTable,
// ordered by component and version; none if the table does not exist.
func Versions(ctx context.Context, db Querier) ([]Version, error) {
	var exists bool
	if err := db.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", VersionsTable).Scan(&exists); err != nil {
		return nil, fmt.Errorf("migrate: versions: %w", err)
	}
	if !exists {
		return nil, nil
	}
	rows, err := db.Query(ctx, "SELECT component, version, applied_at FROM "+VersionsTable+" ORDER BY component, version")
	if err != nil {
		return nil, fmt.Errorf("migrate: versions: %w", err)
	}
	vs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Version, error) {
		var v Version
		err := r.Scan(&v.Component, &v.Version, &v.AppliedAt)
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("migrate: versions: %w", err)
	}
	return vs, nil
}

//go:embed sql/*.sql
var files embed.FS

// load returns the steps of kind from sql/<kind>_NNN.sql, in order, with the quoted
// default names replaced by the given ones (pairs of old, new; one pass, so a
// replacement is never matched again).
func load(kind string, replace ...string) []string {
	var steps []string
	r := strings.NewReplacer(replace...)
	for v := 1; ; v++ {
		b, err := files.ReadFile(fmt.Sprintf("sql/%s_%03d.sql", kind, v))
		if err != nil {
			return steps
		}
		steps = append(steps, r.Replace(string(b)))
	}
}
