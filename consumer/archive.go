package consumer

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// DefaultDeadLetterTable is the archive table of NewDeadLetterArchive when no table name
// is given. It is created in the first schema of the connection's search_path.
const DefaultDeadLetterTable = "choreo_dead_letters"

// archiveMigrateLockID keys the transaction-scoped advisory lock Migrate holds while it
// creates the table, so that instances starting at once do not race on CREATE TABLE IF
// NOT EXISTS. Arbitrary but fixed: the ASCII bytes of "choreoDL".
const archiveMigrateLockID int64 = 0x63686f72656f444c

//go:embed deadletters.sql
var deadLetterSchema string

// DeadLetterArchive is a Postgres table holding the full original of every record that
// DeadLetter could not copy whole to its dead-letter topic: refused for its size, or
// its dead-letter topic is missing. DeadLetter writes the row, in a transaction of its
// own, before it lets the record's offset be committed. Build it with
// NewDeadLetterArchive, create the table with Migrate, and pass it to DeadLetter with
// DeadLetterArchiveTo (or StandardConfig.DeadLetterArchive). It is safe for concurrent
// use.
type DeadLetterArchive struct {
	db     Beginner
	name   string // as given
	quoted string // quoted, possibly schema-qualified
}

// NewDeadLetterArchive returns an archive in table, or DefaultDeadLetterTable when table
// is "", written through db (a *pgxpool.Pool). table may be schema-qualified
// ("billing.dead_letters"); its parts are quoted, so they are case-sensitive. An empty
// part or more than one dot is an error matching ErrInvalidConfig.
func NewDeadLetterArchive(db Beginner, table string) (*DeadLetterArchive, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: dead-letter archive: nil database", ErrInvalidConfig)
	}
	if table == "" {
		table = DefaultDeadLetterTable
	}
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("%w: dead-letter table name %q has more than one dot", ErrInvalidConfig, table)
	}
	for _, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("%w: dead-letter table name %q has an empty part", ErrInvalidConfig, table)
		}
	}
	return &DeadLetterArchive{db: db, name: table, quoted: pgx.Identifier(parts).Sanitize()}, nil
}

// Schema returns the SQL that creates the archive's table, for the migration tool of your
// choice; Migrate runs it under an advisory lock. It is idempotent (IF NOT EXISTS).
func (a *DeadLetterArchive) Schema() string {
	return strings.ReplaceAll(deadLetterSchema, `"`+DefaultDeadLetterTable+`"`, a.quoted)
}

// Migrate creates the archive's table if it does not exist. It is safe to call on every
// start and from several processes at once: it runs in one transaction that first takes
// a transaction-scoped advisory lock.
func (a *DeadLetterArchive) Migrate(ctx context.Context) error {
	// No arguments: pgx sends the script with the simple protocol, so several statements
	// may run in one Exec.
	sql := fmt.Sprintf("SELECT pg_advisory_xact_lock(%d);\n%s", archiveMigrateLockID, a.Schema())
	err := pgx.BeginFunc(ctx, a.db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, sql)
		return err
	})
	if err != nil {
		return fmt.Errorf("consumer: migrate dead-letter archive %s: %w", a.quoted, err)
	}
	return nil
}

// archiveHeader is one record header as the archive's headers column stores it: the value
// is base64 (encoding/json's encoding of []byte), since header values are bytes.
type archiveHeader struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

// archived is what an archive write returns: the row id and the digest of the value.
type archived struct {
	id     int64
	sha256 [sha256.Size]byte
}

// put writes the full original of m's record, with why it was dead-lettered (cause, its
// reason) and why the dead-letter topic refused it (dlqErr), in a transaction of its own,
// and returns the row's id once committed. A record handed over again finds its row.
func (a *DeadLetterArchive) put(ctx context.Context, m *Message, dlqTopic string, cause, dlqErr error) (archived, error) {
	r := m.Record
	out := archived{sha256: sha256.Sum256(r.Value)}
	hs := make([]archiveHeader, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = archiveHeader{pgText(h.Key), h.Value}
	}
	headers, err := json.Marshal(hs)
	if err != nil {
		return out, err
	}
	// The conflict update is a no-op write that makes RETURNING see the existing row.
	sql := `INSERT INTO ` + a.quoted + ` (group_name, topic, partition, "offset", record_time, key, value,
	headers, value_size, value_sha256, dlq_topic, reason, error, dlq_error, attempts)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
ON CONFLICT (group_name, topic, partition, "offset", value_sha256)
DO UPDATE SET dlq_error = EXCLUDED.dlq_error, attempts = EXCLUDED.attempts
RETURNING id`
	err = pgx.BeginFunc(ctx, a.db, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, sql, pgText(m.Group), pgText(r.Topic), r.Partition, r.Offset, r.Timestamp, r.Key, r.Value,
			headers, len(r.Value), out.sha256[:], dlqTopic, Reason(cause), pgText(cause.Error()), pgText(dlqErr.Error()),
			max(m.Attempt, 1)).Scan(&out.id)
	})
	if err != nil {
		return out, fmt.Errorf("consumer: dead-letter archive %s: %w", a.quoted, err)
	}
	return out, nil
}

// pgText makes s storable as Postgres text (and as a jsonb string): valid UTF-8 without
// NUL characters. Error texts may quote the bytes of a malformed payload; a row that
// could never be written would block the partition it is meant to unblock.
func pgText(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}
