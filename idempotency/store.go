package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/choreo-saga/choreo/internal/sqlname"
	"github.com/choreo-saga/choreo/internal/txhook"
	"github.com/choreo-saga/choreo/migrate"
)

// DefaultRetention is how long a record guards its key when no
// WithRetention option is given: 7 days, the default retention of a Kafka
// topic (retention.ms). A record must outlive every redelivery of its event,
// so set the retention longer than the longest replay window you allow
// (topic retention, or how far back you might reset a consumer group).
const DefaultRetention = 7 * 24 * time.Hour

// MaxKeyBytes is the longest scope or key accepted, in bytes.
const MaxKeyBytes = 255

var (
	// ErrKeyReused is returned by Claim and Do when the key was already used
	// with a different request hash. It is not retryable: the same request
	// will fail the same way. A consumer sends such an event to its
	// dead-letter topic; an HTTP API answers 422.
	ErrKeyReused = errors.New("idempotency: key reused with a different request")

	// ErrInvalidKey is returned when a scope or key is empty or longer than
	// MaxKeyBytes bytes. It is not retryable.
	ErrInvalidKey = errors.New("idempotency: invalid key")

	// ErrNotClaimed is returned by Complete when the transaction holds no
	// record for the key, i.e. Claim was not called first.
	ErrNotClaimed = errors.New("idempotency: key not claimed")

	// ErrKeyExists is returned, through the batch, by the statement
	// QueueNewClaim queued when the key already has a record (committed, by
	// a transaction it waited for, or expired and not yet swept). The batch's
	// transaction is aborted and must roll back; claim the key with Claim or
	// ClaimWithResponse in a new transaction to learn whether it is a
	// duplicate, a reuse or an expired record to take over.
	ErrKeyExists = errors.New("idempotency: key already has a record")

	// ErrInvalidConfig is returned by NewStore and NewSweeper for an invalid
	// option value, or an option of the other constructor. Not retryable.
	ErrInvalidConfig = errors.New("idempotency: invalid configuration")
)

// Option configures a Store (NewStore: WithTable, WithRetention) or a Sweeper
// (NewSweeper: WithTable, WithBatchSize, WithSweepInterval, WithSweepHook). An
// invalid value, or an option given to the constructor it does not configure, makes
// the constructor return an error wrapping [ErrInvalidConfig].
type Option func(*config) error

// config is what the options set; sweeper tells which constructor applies them.
type config struct {
	sweeper   bool
	table     sqlname.Name
	retention time.Duration
	batchSize int
	interval  time.Duration
	onSweep   func(deleted int64, err error)
}

// sweeperOnly returns the error of a Sweeper option given to NewStore, or nil.
func (c *config) sweeperOnly(name string) error {
	if !c.sweeper {
		return fmt.Errorf("%w: %s configures a Sweeper, not a Store", ErrInvalidConfig, name)
	}
	return nil
}

// newConfig returns the configuration with every default and then each option applied
// in order, or the first option's error.
func newConfig(sweeper bool, opts []Option) (config, error) {
	c := config{
		sweeper:   sweeper,
		table:     sqlname.MustParse(DefaultTable),
		retention: DefaultRetention,
		batchSize: DefaultSweepBatchSize,
		interval:  DefaultSweepInterval,
	}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// WithTable sets the table name, optionally schema-qualified
// ("billing.idempotency"). Default: DefaultTable in the connection's
// search_path. Several Stores with different tables may share a database.
func WithTable(name string) Option {
	return func(c *config) error {
		t, err := parseTable(name)
		c.table = t
		return err
	}
}

// WithRetention sets how long a record guards its key after it was claimed.
// Default: DefaultRetention (7 days). An expired record no longer counts: a
// later Claim of the same key is treated as a first time, whether or not the
// Sweeper has deleted the record yet. Must be positive.
func WithRetention(d time.Duration) Option {
	return func(c *config) error {
		if c.sweeper {
			return fmt.Errorf("%w: WithRetention configures a Store, not a Sweeper", ErrInvalidConfig)
		}
		if d <= 0 {
			return fmt.Errorf("%w: retention %v is not positive", ErrInvalidConfig, d)
		}
		c.retention = d
		return nil
	}
}

// Hash returns the SHA-256 of parts, each prefixed by its length, so that
// different splits of the same bytes (["ab","c"] and ["a","bc"]) hash
// differently. Use it to build the request hash passed to Claim and Do, for
// example Hash([]byte(ev.Type), ev.Data).
func Hash(parts ...[]byte) []byte {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return h.Sum(nil)
}

// Store records idempotency keys in a Postgres table. It holds no
// connection: every method works inside a transaction or pool the caller
// passes, so one Store can be shared by any number of goroutines.
type Store struct {
	table        sqlname.Name
	retention    time.Duration
	claimSQL     string
	claimAllSQL  string
	lookupSQL    string
	lookupAllSQL string
	takeoverSQL  string
	doneSQL      string
	newSQL       string
}

// Claim is the outcome of claiming a key.
type Claim struct {
	// Duplicate reports that a committed, unexpired record with the same
	// key and request hash exists: the work was already done and the caller
	// must skip it.
	Duplicate bool
	// Response is the response stored by Complete for a duplicate (nil if
	// none was stored). It is always nil for a first claim.
	Response []byte
}

// NewStore returns a Store configured by opts (WithTable, WithRetention). An
// invalid option is an error wrapping ErrInvalidConfig.
func NewStore(opts ...Option) (*Store, error) {
	cfg, err := newConfig(false, opts)
	if err != nil {
		return nil, err
	}
	t := cfg.table.Quoted()
	insert := `INSERT INTO ` + t + ` (scope, key, request_hash, expires_at, response)
VALUES ($1, $2, $3, now() + $4::bigint * interval '1 microsecond', $5)`
	return &Store{
		table:     cfg.table,
		retention: cfg.retention,
		// A first-time claim, the common case, is this one statement: the
		// INSERT takes a new key, and whether it did is its command tag.
		// DO NOTHING leaves an existing record alone without locking it, so
		// duplicates are cheap; Claim then reads the record with lookupSQL,
		// a second statement. Being a new statement, it also sees a record
		// committed by a concurrent transaction the INSERT waited for. $5 is
		// the response stored with a new record (ClaimWithResponse; NULL for
		// Claim).
		claimSQL: insert + `
ON CONFLICT (scope, key) DO NOTHING`,
		// ClaimAll's statement: claimSQL for many keys of one scope. $2 and
		// $3 are the keys, sorted and distinct, and their hashes; the rows
		// are inserted in that order (see ClaimAll). It returns the keys it
		// took; ClaimAll reads the others with lookupAllSQL.
		claimAllSQL: `INSERT INTO ` + t + ` (scope, key, request_hash, expires_at)
SELECT $1, r.key, r.hash, now() + $4::bigint * interval '1 microsecond'
FROM unnest($2::text[], $3::bytea[]) WITH ORDINALITY AS r (key, hash, ord) ORDER BY r.ord
ON CONFLICT (scope, key) DO NOTHING
RETURNING key`,
		// The records of the keys $2 of scope $1, for the keys that
		// claimAllSQL did not take. Each key is looked up on its own
		// (LATERAL ... LIMIT 1): every plan, the generic plan Postgres
		// switches to after five executions included, is then one
		// primary-key probe per key. With key = ANY ($2) the generic plan
		// could scan the scope's rows.
		lookupAllSQL: `SELECT t.key, t.request_hash, t.response, t.expires_at <= now()
FROM unnest($2::text[]) AS k (key)
CROSS JOIN LATERAL (
    SELECT key, request_hash, response, expires_at FROM ` + t + `
    WHERE scope = $1 AND key = k.key LIMIT 1
) AS t`,
		lookupSQL: `SELECT request_hash, response, expires_at <= now() FROM ` + t + ` WHERE scope = $1 AND key = $2`,
		// Taking over an expired record that the Sweeper has not deleted
		// yet. The WHERE is re-checked after waiting for a concurrent
		// takeover, so only one transaction wins.
		takeoverSQL: `UPDATE ` + t + `
SET request_hash = $3, response = $5, created_at = now(),
    expires_at = now() + $4::bigint * interval '1 microsecond'
WHERE scope = $1 AND key = $2 AND expires_at <= now()`,
		doneSQL: `UPDATE ` + t + ` SET response = $3 WHERE scope = $1 AND key = $2`,
		// QueueNewClaim's statement: no ON CONFLICT, so an existing record
		// fails it (unique_violation) and aborts its transaction.
		newSQL: insert,
	}, nil
}

// TableName returns the name of the store's table as given to WithTable
// (DefaultTable by default): give it to migrate.Up with migrate.WithIdempotencyTable
// and to NewSweeper with WithTable.
func (s *Store) TableName() string { return s.table.String() }

// Retention returns the configured record retention.
func (s *Store) Retention() time.Duration { return s.retention }

// Claim records (scope, key) with requestHash inside tx, the caller's
// transaction. Call it before the business writes of that transaction.
//
//   - First time: Claim returns Claim{Duplicate: false}. Do the work in tx,
//     optionally call Complete, and commit. If tx rolls back, so does the
//     claim, and a redelivery does the work again.
//   - Duplicate: a committed record with the same hash exists. Claim returns
//     Claim{Duplicate: true, Response: stored}. Skip the work.
//   - Same key, different hash: Claim returns an error wrapping ErrKeyReused.
//
// If another transaction has claimed the same key and not yet finished,
// Claim blocks on the table's primary key until it commits (then this is a
// duplicate) or rolls back (then this is the first time). Hence, of any
// number of concurrent transactions with one key, exactly one does the work.
// A duplicate takes no row lock and writes nothing, so redelivery storms
// are cheap. An expired record still in the table (not yet swept) counts as
// absent: one claim takes it over, the others then see that claim's record.
//
// A first-time claim, the common case, takes one round trip: an INSERT
// that does nothing if the key has a record. Any other outcome reads the
// record in a second one (a duplicate, a reused key, a claim that waited
// for a concurrent winner); taking over an expired record takes a third.
//
// A transaction may claim several keys (a batch of events): prefer
// ClaimAll, which claims them in one round trip (two if some have a
// record). Claim them one by one only in a consistent order, sorted like
// ClaimAll's, so that two transactions racing on the same keys wait for
// each other instead of deadlocking (Postgres would abort one of them with
// SQLSTATE 40P01, which is retryable).
//
// Claim is designed for READ COMMITTED, Postgres' default. Under REPEATABLE
// READ or SERIALIZABLE, a claim that waited for a concurrent winner fails
// with a serialization error (SQLSTATE 40001), which is retryable.
//
// Scope namespaces keys (e.g. the consumer group or the HTTP route); scope
// and key must each be 1 to MaxKeyBytes bytes, or ErrInvalidKey is returned.
func (s *Store) Claim(ctx context.Context, tx pgx.Tx, scope, key string, requestHash []byte) (Claim, error) {
	if err := checkKey(scope, key); err != nil {
		return Claim{}, err
	}
	return s.claim(ctx, tx, scope, key, nonNil(requestHash), nil, nil, txhook.Leading(ctx))
}

// ClaimWithResponse is Claim for a caller that knows its response before
// doing the work (e.g. an id it generated up front): a first-time claim
// stores response with the record in the claim's own statement, as Claim
// followed by Complete would, one round trip fewer. If tx rolls back, the
// record and its response roll back together; if it commits, the record is
// complete. Duplicates and ErrKeyReused are as for Claim (a duplicate gets
// the response stored by the first claim, not this one). A nil response
// stores none, like Claim.
func (s *Store) ClaimWithResponse(ctx context.Context, tx pgx.Tx, scope, key string, requestHash, response []byte) (Claim, error) {
	if err := checkKey(scope, key); err != nil {
		return Claim{}, err
	}
	return s.claim(ctx, tx, scope, key, nonNil(requestHash), response, nil, txhook.Leading(ctx))
}

// record is what a claim saw of a key's row: either its INSERT inserted the
// row (claimed), or a lookup read an existing one.
type record struct {
	claimed          bool
	stored, response []byte
	expired          bool
}

// fields returns the destinations of lookupSQL's columns (lookupAllSQL's
// after the key).
func (r *record) fields() []any { return []any{&r.stored, &r.response, &r.expired} }

// QueueNewClaim queues into b a statement that claims (scope, key) as a
// first time, with requestHash and response, and fails if the key already
// has a record: then the batch's error wraps ErrKeyExists, the statements
// queued after it do not run, and its transaction must roll back (an
// implicit transaction, a batch sent on a pool or connection, rolls back by
// itself). It lets a caller that knows its response up front send the claim
// in the same round trip as the work it guards: the common first time costs
// no round trip of its own, and a key that exists falls back to
// ClaimWithResponse in a new transaction (a duplicate, ErrKeyReused, or the
// takeover of an expired record). Like Claim, the statement waits for a
// concurrent transaction holding the same key; if that one commits, this
// one fails with ErrKeyExists. An invalid scope or key is ErrInvalidKey,
// returned before anything is queued.
func (s *Store) QueueNewClaim(b *pgx.Batch, scope, key string, requestHash, response []byte) error {
	if err := checkKey(scope, key); err != nil {
		return err
	}
	b.Queue(s.newSQL, scope, key, nonNil(requestHash), s.retention.Microseconds(), response).Fn = func(br pgx.BatchResults) error {
		_, err := br.Exec()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {
			return fmt.Errorf("%w: scope %q key %q", ErrKeyExists, scope, key)
		}
		if err != nil {
			return fmt.Errorf("idempotency: claim %s/%s: %w", scope, key, err)
		}
		return nil
	}
	return nil
}

// uniqueViolation is Postgres' SQLSTATE for a duplicate primary key.
const uniqueViolation = "23505"

// claim decides the claim of a checked key with a non-nil requestHash; a
// first-time claim stores response (nil: none) with the record. seen, if not
// nil, is what earlier statements of tx (ClaimAll's) saw of the key; it stands
// for the first pass's claimSQL and lookupSQL, so a decided record costs no
// round trip. leading (txhook.WithLeading's statements; nil with seen) go out
// with the first claimSQL, in one round trip; their first error is returned as
// it is.
func (s *Store) claim(ctx context.Context, tx pgx.Tx, scope, key string, requestHash, response []byte, seen *record, leading []txhook.Stmt) (Claim, error) {
	retention := s.retention.Microseconds()
	// Each pass ends in a decision unless a concurrent transaction changed
	// the record under us (took over or deleted an expired record); then the
	// next pass sees the new state. Three passes are plenty: every retry
	// means another transaction made progress on this key.
	for range 3 {
		r := seen
		seen = nil
		if r == nil {
			r = new(record)
			err := query(ctx, tx, leading, s.claimSQL, []any{scope, key, requestHash, retention, response}, func(rows pgx.Rows) error {
				rows.Close()
				r.claimed = rows.CommandTag().RowsAffected() == 1
				return rows.Err()
			})
			var lerr leadingError
			if errors.As(err, &lerr) {
				return Claim{}, lerr.err
			}
			leading = nil
			if err == nil && !r.claimed {
				// The key has a record: committed before the INSERT, or by a
				// concurrent claim that the INSERT waited for.
				err = tx.QueryRow(ctx, s.lookupSQL, scope, key).Scan(r.fields()...)
				if errors.Is(err, pgx.ErrNoRows) {
					continue // deleted meanwhile (swept after expiring): claim again
				}
			}
			if err != nil {
				return Claim{}, fmt.Errorf("idempotency: claim %s/%s: %w", scope, key, err)
			}
		}
		if r.claimed {
			return Claim{}, nil
		}
		if r.expired {
			tag, err := tx.Exec(ctx, s.takeoverSQL, scope, key, requestHash, retention, response)
			if err != nil {
				return Claim{}, fmt.Errorf("idempotency: claim %s/%s: take over expired record: %w", scope, key, err)
			}
			if tag.RowsAffected() == 1 {
				return Claim{}, nil
			}
			continue // someone else took it over or swept it first
		}
		if !bytes.Equal(r.stored, requestHash) {
			return Claim{}, errKeyReused(scope, key)
		}
		return Claim{Duplicate: true, Response: r.response}, nil
	}
	return Claim{}, fmt.Errorf("idempotency: claim %s/%s: record kept changing under concurrent claims; retry", scope, key)
}

// leadingError is the error of a statement the caller asked to lead the claim
// (txhook.WithLeading); Claim returns it as it is.
type leadingError struct{ err error }

func (e leadingError) Error() string { return e.err.Error() }

// query runs sql with args in tx and reads its rows with read, which must
// close them. It is always sent as one pgx batch, the leading statements, if
// any, first in the same round trip: a transaction whose BEGIN waits for its first
// statements (the consumer's) sends it with the claim either way. The first leading statement's error is reported as a
// leadingError, before sql's own error: a claim that follows a failed
// statement of the batch fails too.
func query(ctx context.Context, tx pgx.Tx, leading []txhook.Stmt, sql string, args []any, read func(pgx.Rows) error) error {
	b := &pgx.Batch{}
	var lerr, cerr error
	for _, st := range leading {
		b.Queue(st.SQL, st.Args...).QueryRow(func(row pgx.Row) error {
			if err := st.Row(row); err != nil && lerr == nil {
				lerr = err
			}
			return nil
		})
	}
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		cerr = read(rows)
		return nil
	})
	err := tx.SendBatch(ctx, b).Close()
	switch {
	case lerr != nil:
		return leadingError{lerr}
	case cerr != nil:
		return cerr
	default:
		return err
	}
}

func errKeyReused(scope, key string) error {
	return fmt.Errorf("%w: scope %q key %q", ErrKeyReused, scope, key)
}

// Complete stores response for a key claimed in the same transaction, so
// that later duplicates receive it from Claim or Do. Call it only after a
// first-time Claim; response may be nil.
func (s *Store) Complete(ctx context.Context, tx pgx.Tx, scope, key string, response []byte) error {
	if err := checkKey(scope, key); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, s.doneSQL, scope, key, response)
	if err != nil {
		return fmt.Errorf("idempotency: complete %s/%s: %w", scope, key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: scope %q key %q", ErrNotClaimed, scope, key)
	}
	return nil
}

// Do runs fn at most once per (scope, key) in a transaction it opens on db
// and commits, in the style of pgx.BeginFunc. It is meant for requests that
// carry their own idempotency key, such as an HTTP Idempotency-Key header.
//
// On the first call, fn runs inside the transaction; its response is stored
// with the record and returned with duplicate == false. If fn returns an
// error, the transaction (and with it the claim) is rolled back and the error
// is returned unchanged. On a later call with the same key and hash, fn does
// not run and the stored response is returned with duplicate == true. A
// different hash yields ErrKeyReused.
func (s *Store) Do(ctx context.Context, db migrate.Beginner, scope, key string, requestHash []byte,
	fn func(ctx context.Context, tx pgx.Tx) ([]byte, error),
) (response []byte, duplicate bool, err error) {
	if err := checkKey(scope, key); err != nil {
		return nil, false, err
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		c, err := s.Claim(ctx, tx, scope, key, requestHash)
		if err != nil {
			return err
		}
		if c.Duplicate {
			response, duplicate = c.Response, true
			return nil
		}
		resp, err := fn(ctx, tx)
		if err != nil {
			return err
		}
		if resp != nil {
			if err := s.Complete(ctx, tx, scope, key, resp); err != nil {
				return err
			}
		}
		response = resp
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return response, duplicate, nil
}

func checkKey(scope, key string) error {
	switch {
	case scope == "":
		return fmt.Errorf("%w: empty scope", ErrInvalidKey)
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(scope) > MaxKeyBytes:
		return fmt.Errorf("%w: scope is %d bytes, more than %d", ErrInvalidKey, len(scope), MaxKeyBytes)
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("%w: key is %d bytes, more than %d", ErrInvalidKey, len(key), MaxKeyBytes)
	}
	return nil
}
