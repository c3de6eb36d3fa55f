package consumer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Probes let Retry tell a real outage from a record whose handling fails in a way that
// looks like one (see "Outage confirmation" in the package documentation). The zero
// value has no probe: every outage is waited out without limit.
type Probes struct {
	// Postgres pings the database the handlers use (pgxpool.Pool.Ping), within a
	// context bounded by Timeout, and returns nil when it answered. Standard sets it to
	// the DB's Ping when the DB has one (a *pgxpool.Pool does) and it is nil.
	Postgres func(ctx context.Context) error
	// Redis pings the Redis the handlers use, as Postgres does (the app sets it when
	// Redis is configured).
	Redis func(ctx context.Context) error
	// Timeout bounds each probe (default DefaultProbeTimeout).
	Timeout time.Duration
	// Confirmations is how many outage-class failures of the same record, each followed
	// by probes that answered, it takes before the record's outage is counted as its own
	// failure (default DefaultOutageConfirmations).
	Confirmations int
}

func (p Probes) withDefaults() Probes {
	if p.Timeout <= 0 {
		p.Timeout = DefaultProbeTimeout
	}
	if p.Confirmations <= 0 {
		p.Confirmations = DefaultOutageConfirmations
	}
	return p
}

func (p Probes) any() bool { return p.Postgres != nil || p.Redis != nil }

// dependency is what an outage-class error may have come from.
type dependency int

const (
	depNone     dependency = iota // not refutable: always an outage
	depPostgres                   // a Postgres timeout, deadlock or serialization failure
	depUnknown                    // a timeout of unknown origin: any dependency
)

// refutable reports whether an outage-class error is one a single record can cause while
// its dependencies are healthy, and which dependency to probe. Only timeouts, deadlocks
// and serialization failures qualify: a record can make its own query slow or deadlock,
// but not refuse a connection, shut the server down or drop a table. An error that
// declares an outage itself (wraps ErrOutage) is never refuted.
func refutable(err error) dependency {
	var connectErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	var netErr net.Error
	switch {
	case errors.Is(err, ErrOutage), errors.As(err, &connectErr):
		return depNone
	case errors.As(err, &pgErr):
		if pgErr.Code == "40001" || pgErr.Code == "40P01" {
			return depPostgres
		}
		return depNone
	case pgconn.Timeout(err):
		return depPostgres
	case errors.As(err, &netErr) && netErr.Timeout():
		return depUnknown
	}
	return depNone
}

// answers probes the dependencies err may have come from and reports whether all of them
// answered; false when there is nothing to probe.
func (p Probes) answers(ctx context.Context, err error) bool {
	var probes []func(ctx context.Context) error
	switch refutable(err) {
	case depPostgres:
		probes = []func(ctx context.Context) error{p.Postgres}
	case depUnknown:
		probes = []func(ctx context.Context) error{p.Postgres, p.Redis}
	}
	probed := false
	for _, probe := range probes {
		if probe == nil {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, p.Timeout)
		perr := probe(pctx)
		cancel()
		if perr != nil {
			return false
		}
		probed = true
	}
	return probed
}

// refutedError marks an outage-class error that the probes refuted: the dependencies
// answered, so it is counted as the record's failure.
type refutedError struct{ err error }

func (e *refutedError) Error() string {
	return fmt.Sprintf("dependencies answered their probes: %v", e.err)
}
func (e *refutedError) Unwrap() error { return e.err }
