package consumer

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/internal/sqlname"
	"github.com/choreo-saga/choreo/migrate"
)

// DeadLetterArchive is a Postgres table holding the full original of every record that
// DeadLetter could not copy whole to its dead-letter topic: refused for its size, or
// its dead-letter topic is missing. DeadLetter writes the row, in a transaction of its
// own, before it lets the record's offset be committed. Build it with
// NewDeadLetterArchive, create the table with migrate.Up (migrate.WithDeadLetterTable for
// another name), and pass it to DeadLetter with
// DeadLetterArchiveTo (or StandardConfig.DeadLetterArchive). It is safe for concurrent
// use.
type DeadLetterArchive struct {
	db     migrate.Beginner
	table  sqlname.Name
	name   string // as given
	quoted string // table.Quoted()
}

// NewDeadLetterArchive returns an archive in table, or DefaultDeadLetterTable when table
// is "", written through db (a *pgxpool.Pool). table may be schema-qualified
// ("billing.dead_letters"); its parts are quoted, so they are case-sensitive. An empty
// part, a part longer than 63 bytes or more than one dot is an error matching
// ErrInvalidConfig.
func NewDeadLetterArchive(db migrate.Beginner, table string) (*DeadLetterArchive, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: dead-letter archive: nil database", ErrInvalidConfig)
	}
	if table == "" {
		table = DefaultDeadLetterTable
	}
	t, err := sqlname.Parse(table)
	if err != nil {
		return nil, fmt.Errorf("%w: dead-letter archive: %w", ErrInvalidConfig, err)
	}
	return &DeadLetterArchive{db: db, table: t, name: table, quoted: t.Quoted()}, nil
}

// TableName returns the archive's table name as given (DefaultDeadLetterTable if "").
func (a *DeadLetterArchive) TableName() string { return a.name }

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
