package consumer

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// outageSQLStates are the SQLSTATEs, besides class 08 (connection exception), that mean
// the database cannot serve the chain right now rather than that the record is bad.
var outageSQLStates = map[string]bool{
	"57P01": true, // admin_shutdown
	"57P02": true, // crash_shutdown
	"57P03": true, // cannot_connect_now
	"53300": true, // too_many_connections
	"40001": true, // serialization_failure
	"40P01": true, // deadlock_detected
	"42P01": true, // undefined_table: a deployment error, fixed by a migration
	"42703": true, // undefined_column: idem
}

// IsOutage reports whether err is a failure of the infrastructure the handler chain
// depends on, rather than of the record: the runtime then retries the record in place
// without limit (see the package documentation), Retry does not spend its budget on it
// and DeadLetter never dead-letters it. It matches, anywhere in err's chain:
//
//   - ErrOutage, for handlers that declare their own dependency's failure;
//   - Postgres: *pgconn.ConnectError (whatever the server answered the connection:
//     a database not accepting connections or missing, authentication failing after a
//     credential rotation), errors pgconn.SafeToRetry or pgconn.Timeout reports, and
//     the SQLSTATEs of class 08 (connection exception), 57P01–57P03
//     (shutdown, cannot connect now), 53300 (too many connections), 40001 and 40P01
//     (serialization failure, deadlock) and 42P01 and 42703 (undefined table or
//     column: a deployment error);
//   - Redis (also wrapped by lock.Locker.Acquire, AcquireAll and Lease.CheckFence):
//     redis.ErrClosed, redis.ErrPoolTimeout, redis.ErrPoolExhausted and the LOADING,
//     READONLY, MASTERDOWN, CLUSTERDOWN and TRYAGAIN replies, and MOVED and ASK (a slot
//     that moved, e.g. in a failover, reaching a client that did not follow it);
//   - Kafka (a dead-letter produce): retriable broker errors (kerr.IsRetriable),
//     kgo.ErrRecordTimeout, kgo.ErrRecordRetries and *kgo.ErrFirstReadEOF;
//   - the network: any net.Error (timeouts included; a context deadline that expires
//     inside a handler is one, as is a pool acquire that times out), io.EOF,
//     io.ErrUnexpectedEOF, net.ErrClosed, and refused, reset, aborted or broken
//     connections.
//
// It never matches when the chain holds kerr.MessageTooLarge, kerr.RecordListTooLarge or
// kerr.UnknownTopicOrPartition (the broker refusing a dead letter: a problem of the
// record or of the topic's setup, which an outage wait would not fix), nor for a
// cancelled context (the runtime taking the record away), nor for ErrRetriesExhausted
// (Retry counted the failure as the record's after probing its dependencies; see Retry).
func IsOutage(err error) bool {
	switch {
	case err == nil,
		errors.Is(err, ErrRetriesExhausted),
		errors.Is(err, kerr.MessageTooLarge),
		errors.Is(err, kerr.RecordListTooLarge),
		errors.Is(err, kerr.UnknownTopicOrPartition),
		errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, ErrOutage):
		return true
	}
	// A failure to connect is never the record's, whatever the server answered (it
	// wraps the server's FATAL: database not accepting connections, role or database
	// missing, authentication failed after a credential rotation, ...).
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || outageSQLStates[pgErr.Code]
	}
	var firstReadEOF *kgo.ErrFirstReadEOF
	var netErr net.Error
	switch {
	case pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return true
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted),
		redis.IsLoadingError(err), redis.IsReadOnlyError(err), redis.IsClusterDownError(err),
		redis.IsTryAgainError(err), redis.IsMasterDownError(err), isRedirect(err):
		return true
	case kerr.IsRetriable(err), errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries),
		errors.As(err, &firstReadEOF):
		return true
	case errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return true
	}
	return false
}

// isRedirect reports whether err is a Redis Cluster MOVED or ASK reply.
func isRedirect(err error) bool {
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask
}
