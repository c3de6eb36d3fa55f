package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/migrate"
)

// ensureDatabase creates the database named in dsn if it does not exist, connecting to
// the server's "postgres" maintenance database to do so (the dsn's user needs the
// CREATEDB privilege then). It is safe to run from several processes at once. Errors
// never contain the dsn, which may carry a password. The dsn may carry pgxpool's
// pool_* settings (pool_max_conns, pool_min_conns, ...), as DATABASE_URL may.
func ensureDatabase(ctx context.Context, dsn string) error {
	pcfg, err := pgxpool.ParseConfig(dsn) // strips the pool_* settings a server would reject
	if err != nil {
		return fmt.Errorf("%w: %s: not a Postgres connection string", ErrInvalidConfig, envDatabaseURL)
	}
	cfg := pcfg.ConnConfig
	name := cfg.Database
	if name == "" {
		return fmt.Errorf("%w: %s: names no database", ErrInvalidConfig, envDatabaseURL)
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

// MigrateSQL runs script (one or more statements, typically a service's embedded
// schema.sql written with IF NOT EXISTS) in one transaction that first takes a
// transaction-scoped advisory lock derived from name, so instances starting together
// apply it one after the other instead of racing on the catalog. It is for a service's
// own tables; the library's are migrate.Up's.
func MigrateSQL(ctx context.Context, db migrate.Beginner, name, script string) error {
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

// warmPoolTimeout bounds the wait for the pool's warm-up at start; warmPoolSettle is how
// long pgxpool's background opening may take to begin before "nothing is opening" means
// it gave up.
const (
	warmPoolTimeout = 30 * time.Second
	warmPoolSettle  = time.Second
)

// warmPool waits, before New returns, for the MinConns connections (DATABASE_MIN_CONNS)
// that pgxpool opens in the background, so the first requests and events after a start do
// not each wait for a new Postgres backend. A warm-up that falls short (the server out of
// connections, say) is logged and the App starts with what it has; pgxpool's health check
// tries again every minute.
func (a *App) warmPool(ctx context.Context) {
	want := a.Pool.Config().MinConns
	if want <= 0 {
		return
	}
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st := a.Pool.Stat()
		open := st.TotalConns() - st.ConstructingConns()
		waited := time.Since(start)
		switch {
		case open >= want:
			a.Logger.Info("app: postgres pool warmed", "min_conns", want, "took", waited)
			return
		case st.ConstructingConns() == 0 && waited > warmPoolSettle, waited > warmPoolTimeout:
			a.Logger.Warn("app: postgres pool warm-up incomplete (is the server or the role at its connection limit?): the first transactions open the rest",
				"min_conns", want, "opened", open)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
