package tracing

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SpanAttributesForTest exposes spanAttributes to the package's external tests.
var SpanAttributesForTest = spanAttributes

// PgxTracerForTest returns the pgx tracer InstrumentPostgres installs.
func PgxTracerForTest(opts ...InstrumentOption) pgx.QueryTracer {
	cfg := &pgxpool.Config{ConnConfig: &pgx.ConnConfig{}}
	InstrumentPostgres(cfg, opts...)
	return cfg.ConnConfig.Tracer.(pgx.QueryTracer)
}
