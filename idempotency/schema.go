package idempotency

import (
	"fmt"

	"github.com/choreo-saga/choreo/internal/sqlname"
)

// DefaultTable is the name of the idempotency table when no WithTable option
// is given. It is created in the first schema of the connection's search_path
// by migrate.Up (migrate.WithIdempotencyTable names another).
const DefaultTable = "choreo_idempotency"

// parseTable validates a table name (see WithTable).
func parseTable(name string) (sqlname.Name, error) {
	t, err := sqlname.Parse(name)
	if err != nil {
		return t, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return t, nil
}
