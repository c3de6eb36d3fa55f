package consumer

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/internal/sqlname"
	"github.com/choreo-saga/choreo/migrate"
)

// DeadLetterArchive is a Postgres table holding the original of every record that
// DeadLetter could not copy whole to its dead-letter topic: refused for its size, or
// its dead-letter topic is missing. A row keeps at most ArchiveValueBytes of the value
// and 32 KiB each of key and headers; the rest is summarised by the value's size and
// SHA-256. DeadLetter writes the row, in a transaction of its
// own, before it lets the record's offset be committed. Build it with
// NewDeadLetterArchive, create the table with migrate.Up (migrate.WithDeadLetterTable for
// another name), and pass it to the dead-letter middleware as
// StandardConfig.DeadLetterArchive. It is safe for concurrent use.
type DeadLetterArchive struct {
	db         migrate.Beginner
	table      sqlname.Name
	name       string // as given
	quoted     string // table.Quoted()
	valueBytes int    // ArchiveValueBytes
}

// ArchiveOption configures a DeadLetterArchive; an invalid value makes
// NewDeadLetterArchive return an error wrapping ErrInvalidConfig.
type ArchiveOption func(*archiveConfig) error

type archiveConfig struct {
	valueBytes int
}

// Bounds of an archive row besides its value (see ArchiveValueBytes).
const (
	archiveKeyBytes     = 32 << 10 // the key is cut to this
	archiveHeadersBytes = 32 << 10 // original headers are kept, in order, while they fit
)

// ArchiveValueBytes sets how many leading bytes of a value an archive row keeps (default
// DefaultArchiveValueBytes; at least 1 KiB). Keep it at least the decoder's payload
// limit, so that every record a handler could have applied is archived whole. A row
// whose record was cut (a longer value, a key or headers over 32 KiB each) gets the
// HeaderDLQTruncated and HeaderDLQOriginalSize headers after the original headers it
// kept; value_size and value_sha256 describe the whole original value.
func ArchiveValueBytes(n int) ArchiveOption {
	return func(c *archiveConfig) error {
		if n < 1<<10 {
			return fmt.Errorf("%w: dead-letter archive: value bytes %d: want at least 1024", ErrInvalidConfig, n)
		}
		c.valueBytes = n
		return nil
	}
}

// NewDeadLetterArchive returns an archive in table, or DefaultDeadLetterTable when table
// is "", written through db (a *pgxpool.Pool). table may be schema-qualified
// ("billing.dead_letters"); its parts are quoted, so they are case-sensitive. An empty
// part, a part longer than 63 bytes or more than one dot is an error matching
// ErrInvalidConfig, as is an invalid option.
func NewDeadLetterArchive(db migrate.Beginner, table string, opts ...ArchiveOption) (*DeadLetterArchive, error) {
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
	cfg := archiveConfig{valueBytes: DefaultArchiveValueBytes}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &DeadLetterArchive{db: db, table: t, name: table, quoted: t.Quoted(), valueBytes: cfg.valueBytes}, nil
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

// put writes the original of m's record, bounded (see ArchiveValueBytes), with why it
// was dead-lettered (cause, its reason) and why the dead-letter topic refused it
// (dlqErr), in a transaction of its own, and returns the row's id once committed. A
// record handed over again finds its row.
func (a *DeadLetterArchive) put(ctx context.Context, m *Message, dlqTopic string, cause, dlqErr error) (archived, error) {
	r := m.Record
	out := archived{sha256: sha256.Sum256(r.Value)}
	key, value := clip(r.Key, archiveKeyBytes), clip(r.Value, a.valueBytes)
	cut := len(key) < len(r.Key) || len(value) < len(r.Value)
	hs := make([]archiveHeader, 0, len(r.Headers)+2)
	budget := archiveHeadersBytes
	for _, h := range r.Headers {
		if budget -= len(h.Key) + len(h.Value); budget < 0 {
			cut = true
			break
		}
		hs = append(hs, archiveHeader{pgText(h.Key), h.Value})
	}
	if cut {
		hs = append(hs, archiveHeader{HeaderDLQTruncated, []byte("true")},
			archiveHeader{HeaderDLQOriginalSize, []byte(strconv.Itoa(len(r.Value)))})
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
		return tx.QueryRow(ctx, sql, pgText(m.Group), pgText(r.Topic), r.Partition, r.Offset, r.Timestamp, key, value,
			headers, len(r.Value), out.sha256[:], dlqTopic, Reason(cause), pgText(clipError(cause)), pgText(clipError(dlqErr)),
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
