package outbox

import (
	"fmt"
	"hash/fnv"

	imigrate "github.com/choreo-saga/choreo/internal/migrate"
	"github.com/choreo-saga/choreo/internal/sqlname"
)

// DefaultTable is the name of the outbox table when no [WithTable] option is given.
// The dead-letter table is always the outbox table's name followed by "_dead". migrate.Up
// creates both (migrate.WithOutboxTable names another).
const DefaultTable = "choreo_outbox"

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
	if !n.Plain(imigrate.OutboxMaxPartLen) {
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
