package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/migrate"
)

// The code block of docs/architecture.md (see doc.go). README.md's block is
// embedConsumer in consumer/example_test.go, which ExampleStandard runs.

// migrateLibrary creates or upgrades the library's tables in pool's database.
func migrateLibrary(ctx context.Context, pool *pgxpool.Pool) error {
	// snippet:start migrate
	err := migrate.Up(ctx, pool) // or migrate.Up(ctx, pool, migrate.WithIdempotencyTable("billing.idem"), ...)
	// snippet:end migrate
	return err
}
