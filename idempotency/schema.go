package idempotency

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/choreo-saga/choreo/internal/migrate"
	"github.com/choreo-saga/choreo/internal/sqlname"
)

// DefaultTable is the name of the idempotency table when no WithTable option
// is given. It is created in the first schema of the connection's search_path.
const DefaultTable = "choreo_idempotency"

// Schema is the SQL of every migration of the default idempotency table
// (DefaultTable) and its index, in version order, each after a
// "-- choreo migration: idempotency version N" line. Every step is safe to
// re-run (IF NOT EXISTS), so it can be copied into the migration tool of your
// choice; it takes no lock and records no version (Migrate does both). Use
// SchemaFor or Store.Schema for a custom table name.
var Schema = migrate.Idempotency(sqlname.MustParse(DefaultTable)).SQL()

// Execer is the smallest interface the Sweeper needs; it is satisfied by
// *pgx.Conn, *pgxpool.Pool and pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SchemaFor returns Schema for the given table name, which may be
// schema-qualified ("billing.idempotency"). Names are quoted, so they are
// case-sensitive and any characters are allowed.
func SchemaFor(table string) (string, error) {
	t, err := parseTable(table)
	if err != nil {
		return "", err
	}
	return migrate.Idempotency(t).SQL(), nil
}

// Migrate applies the idempotency table's numbered migrations that db has not
// recorded yet, in one transaction holding the advisory lock that every choreo
// migration takes, and records each version in choreo_schema_migrations (see
// the package migrate for all of the library's tables at once). It is safe to
// call on every start and from several processes at once. db is a
// *pgxpool.Pool, a *pgx.Conn or a pgx.Tx (then a savepoint, and the lock is
// held until that transaction ends).
func Migrate(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, opts ...TableOption) error {
	cfg, err := newConfig(opts, func(o TableOption, c *config) error { return o(c) })
	if err != nil {
		return err
	}
	if err := migrate.Apply(ctx, db, migrate.Idempotency(cfg.table)); err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	return nil
}

// parseTable validates a table name (see WithTable).
func parseTable(name string) (sqlname.Name, error) {
	t, err := sqlname.Parse(name)
	if err != nil {
		return t, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return t, nil
}
