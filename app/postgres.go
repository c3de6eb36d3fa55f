package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// warmPool opens, before New returns, the warm connections DATABASE_MIN_CONNS asks for, or
// waits for the MinConns connections that pgxpool opens in the background (pool_min_conns
// in DATABASE_URL), so the first requests and events after a start do not each wait for a
// new Postgres backend. DATABASE_MIN_CONNS's are ordinary pool connections afterwards,
// closed once idle for defaultDatabaseIdleTime, so an idle instance holds none of them;
// pool_min_conns' stay open. A warm-up that falls short (the server out of connections,
// say) is logged and the App starts with what it has.
func (a *App) warmPool(ctx context.Context, warm int32) {
	start := time.Now()
	want, open := warm, int32(0)
	switch {
	case warm > 0:
		open = a.openConns(ctx, warm)
	case a.Pool.Config().MinConns > 0:
		want = a.Pool.Config().MinConns
		open = a.waitMinConns(ctx, want)
	default:
		return
	}
	if open >= want {
		a.Logger.Info("app: postgres pool warmed", "min_conns", want, "took", time.Since(start))
		return
	}
	a.Logger.Warn("app: postgres pool warm-up incomplete (is the server or the role at its connection limit?): the first transactions open the rest",
		"min_conns", want, "opened", open)
}

// openConns acquires n connections of the pool at once (each a new backend, as the pool
// is empty), releases them, and returns how many it got within warmPoolTimeout.
func (a *App) openConns(ctx context.Context, n int32) int32 {
	wctx, cancel := context.WithTimeout(ctx, warmPoolTimeout)
	defer cancel()
	conns := make([]*pgxpool.Conn, n)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() { conns[i], _ = a.Pool.Acquire(wctx) })
	}
	wg.Wait()
	var open int32
	for _, c := range conns {
		if c != nil {
			open++
			c.Release()
		}
	}
	return open
}

// waitMinConns waits until pgxpool opened want connections in the background, or gave
// up, and returns how many are open.
func (a *App) waitMinConns(ctx context.Context, want int32) int32 {
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st := a.Pool.Stat()
		open := st.TotalConns() - st.ConstructingConns()
		waited := time.Since(start)
		if open >= want || st.ConstructingConns() == 0 && waited > warmPoolSettle || waited > warmPoolTimeout {
			return open
		}
		select {
		case <-ctx.Done():
			return open
		case <-tick.C:
		}
	}
}
