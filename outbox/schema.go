package outbox

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/choreo-saga/choreo/internal/migrate"
	"github.com/choreo-saga/choreo/internal/sqlname"
)

// DefaultTable is the name of the outbox table when no [WithTable] option is given.
// The dead-letter table is always the outbox table's name followed by "_dead".
const DefaultTable = "choreo_outbox"

// Schema is the SQL of every migration of the default outbox and dead-letter
// tables (choreo_outbox, choreo_outbox_dead), in version order, each after a
// "-- choreo migration: outbox version N" line. Every step is safe to re-run
// (IF NOT EXISTS), so it can be fed to any migration tool; it takes no lock
// and records no version ([Migrate] does both). Use [Outbox.Schema] for a
// custom table name.
var Schema = migrate.Outbox(sqlname.MustParse(DefaultTable)).SQL()

// Execer is the smallest interface the NOTIFY of [WithNotifier] needs;
// *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate applies the numbered migrations of the default outbox tables that db
// has not recorded yet (see [Outbox.Migrate]).
func Migrate(ctx context.Context, db Beginner) error {
	return defaultOutbox().Migrate(ctx, db)
}

// defaultOutbox is an Outbox for DefaultTable, which is always valid.
func defaultOutbox() *Outbox {
	n, _ := newNames(DefaultTable)
	return &Outbox{names: n}
}

// names holds everything derived from the outbox table name.
type names struct {
	name    sqlname.Name
	table   string // outbox table, as given (a plain name: the same quoted or not)
	dead    string // dead-letter table
	channel string // LISTEN/NOTIFY channel
	lockKey int64  // advisory lock key for the relay leader
}

// newNames validates table. On top of the rule every choreo table name follows
// (see [WithTable]), an outbox table name is a lower-case identifier of at most 48
// bytes per part, because the dead-letter table's name and the NOTIFY channel
// are derived from it and written into SQL unquoted.
func newNames(table string) (names, error) {
	n, err := sqlname.Parse(table)
	if err != nil {
		return names{}, fmt.Errorf("%w: %w", ErrInvalidTable, err)
	}
	if !n.Plain(migrate.OutboxMaxPartLen) {
		return names{}, fmt.Errorf("%w: %q (want a lower-case identifier, optionally schema-qualified)", ErrInvalidTable, table)
	}
	h := fnv.New64a()
	h.Write([]byte("choreo/outbox/relay/" + table))
	return names{
		name:    n,
		table:   table,
		dead:    table + "_dead",
		channel: table,
		lockKey: int64(h.Sum64()),
	}, nil
}

func (n names) schema() string { return migrate.Outbox(n.name).SQL() }
