// Package migrate creates and upgrades the Postgres tables of the choreo library with
// numbered, recorded migrations:
//
//	if err := migrate.Up(ctx, pool); err != nil { ... }
//
// The tables are the idempotency records (package idempotency), the lock fences (package
// lock), the outbox and its dead-letter table (package outbox) and the dead-letter archive
// (package consumer). Each table's migrations are numbered from 1, and the versions a
// database has are recorded in the choreo_schema_migrations table (component, version,
// applied_at), where a component is the table's kind and its schema-qualified name, e.g.
// "idempotency:public.choreo_idempotency". Up applies every version a table does not have
// yet, in order, in one transaction that holds one transaction-scoped advisory lock
// shared by every choreo migration, so instances
// starting together apply them one after the other and a failing step rolls back the
// whole call. Version 1 is the schema of the releases before versioning, written with IF
// NOT EXISTS: a database that already has the tables is upgraded by recording it. Every
// later version is written to be safe to re-run as well.
//
// Unqualified table names, and choreo_schema_migrations itself, live in the first schema
// of the connection's search_path. A database migrated by a newer release (a higher
// recorded version than this release knows) is left as it is.
//
// Up is the library's one migration entry point. To use your own migration tool instead,
// copy the script that SQL returns (sagactl migrate -sql prints it). Versions reports what
// Up recorded; sagactl migrate runs Up and prints it.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	imigrate "github.com/choreo-saga/choreo/internal/migrate"
	"github.com/choreo-saga/choreo/internal/sqlname"
)

// The default table names, the same as the packages' own defaults
// (idempotency.DefaultTable, outbox.DefaultTable, consumer.DefaultDeadLetterTable).
const (
	DefaultIdempotencyTable = "choreo_idempotency"
	DefaultOutboxTable      = "choreo_outbox"
	DefaultDeadLetterTable  = "choreo_dead_letters"
)

// ErrInvalidTable is returned (wrapped) by Up and SQL for an invalid table name. Every
// name is "table" or "schema.table", each part non-empty, at most 63 bytes and quoted (so
// case-sensitive); an outbox table name must also be a lower-case identifier of at most
// 48 bytes per part (see outbox.WithTable).
var ErrInvalidTable = fmt.Errorf("%w: table name", ErrInvalidConfig)

// ErrInvalidConfig is returned (wrapped) by Up and SQL for an option that cannot work;
// ErrInvalidTable wraps it.
var ErrInvalidConfig = errors.New("migrate: invalid configuration")

// Beginner begins transactions; *pgxpool.Pool, *pgx.Conn and pgx.Tx (a savepoint)
// satisfy it. It is the one such interface of the library: every package that takes a
// database to begin transactions on takes a Beginner.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Execer runs a statement; *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it. It is the one
// such interface of the library.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Option sets a table name. An invalid name makes Up and SQL return an error wrapping
// ErrInvalidTable.
type Option func(*config) error

type config struct {
	idempotency, outbox, deadLetters string
}

// WithIdempotencyTable sets the idempotency table's name, as given to
// idempotency.WithTable. Default: DefaultIdempotencyTable.
func WithIdempotencyTable(name string) Option {
	return func(c *config) error {
		_, err := parseTable("idempotency", name)
		c.idempotency = name
		return err
	}
}

// WithOutboxTable sets the outbox table's name, as given to outbox.WithTable; its
// dead-letter table is the name plus "_dead". Default: DefaultOutboxTable.
func WithOutboxTable(name string) Option {
	return func(c *config) error {
		_, err := parseOutboxTable(name)
		c.outbox = name
		return err
	}
}

// WithDeadLetterTable sets the dead-letter archive's table name, as given to
// consumer.NewDeadLetterArchive. Default: DefaultDeadLetterTable.
func WithDeadLetterTable(name string) Option {
	return func(c *config) error {
		_, err := parseTable("dead letters", name)
		c.deadLetters = name
		return err
	}
}

// components returns the library's tables in the order Up migrates them.
func components(opts []Option) ([]imigrate.Component, error) {
	c := config{idempotency: DefaultIdempotencyTable, outbox: DefaultOutboxTable, deadLetters: DefaultDeadLetterTable}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	// The options checked the names; the defaults are valid.
	idem, _ := parseTable("idempotency", c.idempotency)
	ob, _ := parseOutboxTable(c.outbox)
	dl, _ := parseTable("dead letters", c.deadLetters)
	return []imigrate.Component{imigrate.Idempotency(idem), imigrate.Fences(), imigrate.Outbox(ob), imigrate.DeadLetters(dl)}, nil
}

// parseTable parses the name of the what table.
func parseTable(what, name string) (sqlname.Name, error) {
	n, err := sqlname.Parse(name)
	if err != nil {
		return n, fmt.Errorf("%w: %s: %w", ErrInvalidTable, what, err)
	}
	return n, nil
}

// parseOutboxTable parses an outbox table's name: also a lower-case identifier.
func parseOutboxTable(name string) (sqlname.Name, error) {
	n, err := parseTable("outbox", name)
	if err == nil && !n.Plain(imigrate.OutboxMaxPartLen) {
		err = fmt.Errorf("%w: outbox: %q (want a lower-case identifier, optionally schema-qualified)", ErrInvalidTable, name)
	}
	return n, err
}

// Up applies every migration of the library's tables that db has not recorded yet (see
// the package documentation). It is safe to call on every start, from any number of
// instances at once.
func Up(ctx context.Context, db Beginner, opts ...Option) error {
	comps, err := components(opts)
	if err != nil {
		return err
	}
	return imigrate.Apply(ctx, db, comps...)
}

// SQL returns the SQL of every migration of the library's tables, table by table in the
// order Up applies them, each version after a "-- choreo migration: kind version N"
// line: the script for your own migration tool. Every step is safe to re-run; the script
// takes no lock and records no version.
func SQL(opts ...Option) (string, error) {
	comps, err := components(opts)
	if err != nil {
		return "", err
	}
	var s string
	for i, c := range comps {
		if i > 0 {
			s += "\n"
		}
		s += c.SQL()
	}
	return s, nil
}

// Version is one migration recorded in choreo_schema_migrations.
type Version struct {
	Component string    // kind:schema.table, e.g. "outbox:public.choreo_outbox"
	Version   int       // numbered from 1
	AppliedAt time.Time // when it was applied
}

// Versions returns the migrations recorded in db, ordered by component and version; none
// if Up never ran there. db is a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
func Versions(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) ([]Version, error) {
	vs, err := imigrate.Versions(ctx, db)
	if err != nil {
		return nil, err
	}
	out := make([]Version, len(vs))
	for i, v := range vs {
		out[i] = Version(v)
	}
	return out, nil
}
