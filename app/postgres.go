package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/outbox"
)

// Execer runs SQL; *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Beginner starts a transaction; *pgxpool.Pool and *pgx.Conn satisfy it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// EnsureDatabase creates the database named in dsn if it does not exist, connecting to
// the server's "postgres" maintenance database to do so (the dsn's user needs the
// CREATEDB privilege then). It is safe to run from several processes at once. Errors
// never contain the dsn, which may carry a password.
func EnsureDatabase(ctx context.Context, dsn string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("%w: %s: not a Postgres connection string", ErrConfig, EnvDatabaseURL)
	}
	name := cfg.Database
	if name == "" {
		return fmt.Errorf("%w: %s: names no database", ErrConfig, EnvDatabaseURL)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	if !isPgCode(err, "3D000") { // invalid_catalog_name: the database does not exist
		return fmt.Errorf("app: connect to database %q: %w", name, err)
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err = pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("app: connect to maintenance database to create %q: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	// duplicate_database, or a unique violation on pg_database when the concurrent
	// CREATE DATABASE commits while ours runs: another process won the race.
	if err != nil && !isPgCode(err, "42P04") && !isPgCode(err, "23505") {
		return fmt.Errorf("app: create database %q: %w", name, err)
	}
	return nil
}

func isPgCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

// MigrateLibrary creates the tables of the library packages a choreo service uses, in
// the current search_path: the idempotency records (idempotency.Migrate), the lock
// fences (lock.Migrate), the outbox tables of o (default outbox.New()) and the
// dead-letter archive (consumer.DefaultDeadLetterTable, consumer.DeadLetterArchive). Every
// step is idempotent and takes its own advisory lock, so all instances may run it at
// start. db must also begin transactions, as *pgxpool.Pool, *pgx.Conn and pgx.Tx do.
func MigrateLibrary(ctx context.Context, db Execer, o *outbox.Outbox) error {
	if o == nil {
		o = outbox.New()
	}
	if err := idempotency.Migrate(ctx, db); err != nil {
		return fmt.Errorf("app: migrate: %w", err)
	}
	if err := lock.Migrate(ctx, db); err != nil {
		return fmt.Errorf("app: migrate: %w", err)
	}
	if err := o.Migrate(ctx, db); err != nil {
		return fmt.Errorf("app: migrate: %w", err)
	}
	b, ok := db.(Beginner)
	if !ok {
		return fmt.Errorf("%w: MigrateLibrary: %T cannot begin a transaction", ErrConfig, db)
	}
	archive, err := consumer.NewDeadLetterArchive(b, "")
	if err == nil {
		err = archive.Migrate(ctx)
	}
	if err != nil {
		return fmt.Errorf("app: migrate: %w", err)
	}
	return nil
}

// MigrateSQL runs script (one or more statements, typically a service's embedded
// schema.sql written with IF NOT EXISTS) in one transaction that first takes a
// transaction-scoped advisory lock derived from name, so instances starting together
// apply it one after the other instead of racing on the catalog.
func MigrateSQL(ctx context.Context, db Beginner, name, script string) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "choreo/app/migrate/"+name); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, script)
		return err
	})
	if err != nil {
		return fmt.Errorf("app: migrate %s: %w", name, err)
	}
	return nil
}
