package tracker

import (
	"context"
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	"github.com/choreo-saga/choreo/migrate"
)

// DefaultTable is the name of the tracker's event index table.
const DefaultTable = "choreo_tracker_events"

//go:embed schema.sql
var schemaTemplate string

var tableRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}(\.[a-z_][a-z0-9_]{0,47})?$`)

func validTable(name string) error {
	if !tableRE.MatchString(name) {
		return fmt.Errorf("%w: table %q must be a lower-case identifier, optionally schema-qualified, at most 48 bytes per part", ErrInvalidConfig, name)
	}
	return nil
}

// Schema returns the SQL that creates the index table named table (DefaultTable if
// empty), for use with your own migration tool. Every statement is safe to re-run; apply
// them in one transaction, as Migrate does, so that the saga totals it creates start from
// a count of the summaries no concurrent write slips past.
func Schema(table string) (string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := validTable(table); err != nil {
		return "", err
	}
	idx := table
	if _, after, ok := strings.Cut(table, "."); ok {
		idx = after
	}
	r := strings.NewReplacer("{{.Table}}", table, "{{.Index}}", idx)
	return r.Replace(schemaTemplate), nil
}

// migrateLockKey is the transaction-scoped advisory lock Migrate holds, so tracker
// instances starting together create the table one after the other.
const migrateLockKey int64 = 0x63686f7472616b // "chotrak"

// Migrate creates the index table named table (DefaultTable if empty) if it does not
// exist, in one transaction under an advisory lock; on an index created before the saga
// totals (see Counts), it counts the summaries once, blocking their writers meanwhile.
func Migrate(ctx context.Context, db migrate.Beginner, table string) error {
	sql, err := Schema(table)
	if err != nil {
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("tracker: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
		return fmt.Errorf("tracker: migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		return fmt.Errorf("tracker: migrate: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("tracker: migrate: commit: %w", err)
	}
	return nil
}
