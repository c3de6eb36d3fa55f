package outbox

import (
	"context"
	_ "embed"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultTable is the name of the outbox table when no [Table] option is given.
// The dead-letter table is always the outbox table's name followed by "_dead".
const DefaultTable = "choreo_outbox"

// Schema is the SQL that creates the default outbox and dead-letter tables
// (choreo_outbox, choreo_outbox_dead) in the current search_path. It is
// idempotent and takes a transaction-scoped advisory lock, so it can be fed to
// any migration tool or run by [Migrate] from several instances at once. Use
// [Outbox.Schema] for a custom table name.
//
//go:embed schema.sql
var Schema string

// Execer is the smallest interface Migrate needs; *pgxpool.Pool, *pgx.Conn and
// pgx.Tx satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate creates the default outbox and dead-letter tables if they do not
// exist. It is safe to call on every start, from several instances at once.
func Migrate(ctx context.Context, db Execer) error {
	return migrate(ctx, db, Schema)
}

func migrate(ctx context.Context, db Execer, sql string) error {
	// No arguments: pgx sends the script with the simple protocol, so the
	// statements run as one implicit transaction and the advisory lock at the
	// top covers all of them.
	if _, err := db.Exec(ctx, sql); err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	return nil
}

// tableNameRE accepts a lower-case identifier, optionally schema-qualified.
// Names are interpolated into SQL, so nothing that would need quoting is allowed.
var tableNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}(\.[a-z_][a-z0-9_]{0,47})?$`)

// names holds everything derived from the outbox table name.
type names struct {
	table   string // outbox table
	dead    string // dead-letter table
	channel string // LISTEN/NOTIFY channel
	lockKey int64  // advisory lock key for the relay leader
}

func newNames(table string) (names, error) {
	if !tableNameRE.MatchString(table) {
		return names{}, fmt.Errorf("%w: %q (want a lower-case identifier, optionally schema-qualified)", ErrInvalidTable, table)
	}
	h := fnv.New64a()
	h.Write([]byte("choreo/outbox/relay/" + table))
	return names{
		table:   table,
		dead:    table + "_dead",
		channel: table,
		lockKey: int64(h.Sum64()),
	}, nil
}

func (n names) schema() string {
	if n.table == DefaultTable {
		return Schema
	}
	// Replacing the table name also renames the dead-letter table, whose name
	// is the outbox table's name plus "_dead".
	return strings.ReplaceAll(Schema, DefaultTable, n.table)
}
