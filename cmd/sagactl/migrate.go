package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/migrate"
)

// cmdMigrate applies the library's migrations (package migrate) to a database and prints
// the versions recorded there.
func cmdMigrate(ctx context.Context, args []string, std stdio) error {
	var c conn
	fs := newFlagSet("migrate", std, &c)
	dsn := fs.String("database-url", std.getenv("DATABASE_URL"), "Postgres connection `URL` (env DATABASE_URL)")
	idem := fs.String("idempotency-table", migrate.DefaultIdempotencyTable, "idempotency table `name`, optionally schema-qualified")
	ob := fs.String("outbox-table", migrate.DefaultOutboxTable, "outbox table `name` (its dead-letter table is name_dead)")
	dl := fs.String("dead-letter-table", migrate.DefaultDeadLetterTable, "dead-letter archive table `name`")
	printSQL := fs.Bool("sql", false, "print the SQL of every migration instead of applying it (for your own migration tool)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: sagactl migrate [-database-url URL] [flags]\n\n"+
			"Applies the migrations of the choreo library's tables that the database has not recorded\n"+
			"yet, under the advisory lock every choreo migration takes, and prints the recorded versions.\n\nFlags:")
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: migrate takes no arguments, got %q", errUsage, pos)
	}
	opts := []migrate.Option{migrate.WithIdempotencyTable(*idem), migrate.WithOutboxTable(*ob), migrate.WithDeadLetterTable(*dl)}
	if *printSQL {
		s, err := migrate.SQL(opts...)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		_, err = fmt.Fprintln(std.out, s)
		return err
	}
	if *dsn == "" {
		return fmt.Errorf("%w: migrate needs -database-url or DATABASE_URL", errUsage)
	}
	if _, err := migrate.SQL(opts...); err != nil { // validate the names before connecting
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	cfg, err := pgx.ParseConfig(*dsn)
	if err != nil {
		// The error would quote the URL, which may carry a password.
		return fmt.Errorf("%w: -database-url is not a Postgres connection string", errUsage)
	}
	cfg.ConnectTimeout = c.timeout
	db, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		if isConnError(err) {
			return fmt.Errorf("%w: postgres: %w", errUnreachable, err)
		}
		return fmt.Errorf("sagactl: postgres: %w", err)
	}
	defer db.Close(context.WithoutCancel(ctx))
	if err := migrate.Up(ctx, db, opts...); err != nil {
		return fmt.Errorf("sagactl: %w", err)
	}
	vs, err := migrate.Versions(ctx, db)
	if err != nil {
		return fmt.Errorf("sagactl: %w", err)
	}
	if c.json {
		type version struct {
			Component string    `json:"component"`
			Version   int       `json:"version"`
			AppliedAt time.Time `json:"applied_at"`
		}
		out := make([]version, len(vs))
		for i, v := range vs {
			out[i] = version(v)
		}
		return writeJSON(std.out, struct {
			Versions []version `json:"versions"`
		}{out})
	}
	t := newTable("COMPONENT", "VERSION", "APPLIED AT").right(1)
	for _, v := range vs {
		t.add(v.Component, strconv.Itoa(v.Version), v.AppliedAt.UTC().Format(time.RFC3339))
	}
	return t.render(std.out)
}
