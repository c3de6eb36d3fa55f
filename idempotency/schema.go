package idempotency

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultTable is the name of the idempotency table when no WithTable option
// is given. It is created in the first schema of the connection's search_path.
const DefaultTable = "choreo_idempotency"

// migrateLockID is the key of the transaction-scoped Postgres advisory lock
// that Migrate holds while it creates the schema, so that several processes
// starting at once do not race on CREATE TABLE IF NOT EXISTS (which is not
// safe under concurrency: the loser fails on a unique violation in pg_type).
// The value is arbitrary but fixed: the ASCII bytes of "choreoID".
const migrateLockID int64 = 0x63686f72656f4944

// Schema is the SQL that creates the default idempotency table
// (DefaultTable) and its index: the embedded file schema.sql. It is
// idempotent (IF NOT EXISTS) and is exported so that it can be copied into
// the migration tool of your choice; Migrate runs exactly this SQL. Use
// SchemaFor for a custom table name.
//
//go:embed schema.sql
var Schema string

// Execer is the smallest interface Migrate and the Sweeper need; it is
// satisfied by *pgx.Conn, *pgxpool.Pool and pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SchemaFor returns the schema SQL for the given table name, which may be
// schema-qualified ("billing.idempotency"). Names are quoted, so they are
// case-sensitive and any characters are allowed.
func SchemaFor(table string) (string, error) {
	t, err := parseTable(table)
	if err != nil {
		return "", err
	}
	return t.render(), nil
}

// Migrate creates the idempotency table and its index if they do not exist.
// It is safe to call on every start and from several processes at once: it
// runs as one implicit transaction that first takes a transaction-scoped
// advisory lock. Options other than WithTable are ignored.
//
// If db is a pgx.Tx, the lock is held until that transaction ends.
func Migrate(ctx context.Context, db Execer, opts ...Option) error {
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	// No arguments: pgx sends this with the simple query protocol, so all
	// statements run in a single implicit transaction on one connection.
	sql := fmt.Sprintf("SELECT pg_advisory_xact_lock(%d);\n%s", migrateLockID, cfg.table.render())
	if _, err := db.Exec(ctx, sql); err != nil {
		return fmt.Errorf("idempotency: migrate %s: %w", cfg.table.quoted, err)
	}
	return nil
}

// tableName is a validated, quoted table name.
type tableName struct {
	quoted string // e.g. "billing"."idem"
	index  string // quoted, unqualified index name
}

func parseTable(name string) (tableName, error) {
	if name == "" {
		return tableName{}, fmt.Errorf("%w: empty table name", ErrInvalidOption)
	}
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return tableName{}, fmt.Errorf("%w: table name %q has more than one dot", ErrInvalidOption, name)
	}
	for _, p := range parts {
		if p == "" {
			return tableName{}, fmt.Errorf("%w: table name %q has an empty part", ErrInvalidOption, name)
		}
	}
	base := parts[len(parts)-1]
	return tableName{
		quoted: pgx.Identifier(parts).Sanitize(),
		index:  pgx.Identifier{base + "_expires_at_idx"}.Sanitize(),
	}, nil
}

// render returns Schema for table t. The replacer makes one pass, so a
// replaced name is never matched again, and the quoted default names cannot
// overlap (the table's closing quote is where the index name continues).
func (t tableName) render() string {
	return strings.NewReplacer(
		`"`+DefaultTable+`_expires_at_idx"`, t.index,
		`"`+DefaultTable+`"`, t.quoted,
	).Replace(Schema)
}
