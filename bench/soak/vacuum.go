package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
)

// soakNaptime is the autovacuum_naptime the soak runs Postgres with. A production table
// keeps a 7-day window (the default retention) and autovacuum visits each database every
// minute, 1/10,000 of the window; the soak keeps a window of minutes, so it scales the
// naptime down with it, to the server's floor of one second (about 1/120 of a 2-minute
// window). Without it a minute's dead rows wait for the next visit, a half of the window.
const soakNaptime = "1s"

// scaleAutovacuum sets autovacuum_naptime to soakNaptime on the server behind pgURL (a
// superuser's) and returns the function that resets it.
func scaleAutovacuum(ctx context.Context, pgURL string) (restore func(), err error) {
	set := func(ctx context.Context, stmt string) error {
		conn, err := pgx.Connect(ctx, pgURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return err
		}
		_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
		return err
	}
	if err := set(ctx, "ALTER SYSTEM SET autovacuum_naptime = '"+soakNaptime+"'"); err != nil {
		return nil, fmt.Errorf("soak: autovacuum_naptime: %w", err)
	}
	return func() {
		if err := set(context.Background(), "ALTER SYSTEM RESET autovacuum_naptime"); err != nil {
			fmt.Fprintf(os.Stderr, "soak: resetting autovacuum_naptime: %v (run ALTER SYSTEM RESET autovacuum_naptime)\n", err)
		}
	}, nil
}
