package ordersvc

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/migrate"
)

// Schema is the order service's own SQL schema (tables orders and order_history).
//
//go:embed schema.sql
var Schema string

// Migrate creates the library's tables under their default names (migrate.Up) and the
// service's own tables in db's current search_path. It is idempotent and safe to run
// from several instances at once.
func Migrate(ctx context.Context, db migrate.Beginner) error {
	if err := migrate.Up(ctx, db); err != nil {
		return fmt.Errorf("ordersvc: %w", err)
	}
	if err := app.MigrateSQL(ctx, db, "order", Schema); err != nil {
		return fmt.Errorf("ordersvc: %w", err)
	}
	return nil
}
