package tracker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/choreo-saga/choreo/consumer"
)

// Actions of a Rejection.
const (
	// ActionEscaped: the record is indexed, with the fields Rejection.Detail names
	// escaped or cut (see MaxFieldBytes).
	ActionEscaped = "escaped"
	// ActionSkipped: the record is not indexed; Rejection.Detail says why.
	ActionSkipped = "skipped"
	// ActionRefused: the record is not indexed because the services refuse it (see
	// WithTrust); Rejection.Detail starts with the reason (bad_signature, untrusted,
	// malformed).
	ActionRefused = "refused"
)

// Rejection is a record the tracker did not index as it was. Its offset was committed
// like any other's: a record never stops the tracker.
type Rejection struct {
	Topic     string
	Partition int32
	Offset    int64
	Action    string // ActionEscaped, ActionSkipped or ActionRefused
	Detail    string // the fields escaped, or why the record was skipped
	At        time.Time
}

// Rejections are the tracker's rejected records: how many of each action are kept
// (retention deletes them with the events) and the latest ones.
type Rejections struct {
	Escaped, Skipped, Refused int64
	Latest                    []Rejection // newest first
}

func (t *Tracker) rejectedTable() string { return t.table + "_rejected" }

// Rejected returns the counts of rejected records and the latest limit of them.
func (t *Tracker) Rejected(ctx context.Context, limit int) (Rejections, error) {
	var out Rejections
	rows, err := t.db.Query(ctx, `SELECT count(*) FILTER (WHERE action = $1), count(*) FILTER (WHERE action = $2),
		count(*) FILTER (WHERE action = $3) FROM `+t.rejectedTable(), ActionEscaped, ActionSkipped, ActionRefused)
	if err == nil {
		_, err = pgx.ForEachRow(rows, []any{&out.Escaped, &out.Skipped, &out.Refused}, func() error { return nil })
	}
	if err != nil {
		return out, fmt.Errorf("tracker: rejected: %w", err)
	}
	rows, err = t.db.Query(ctx, `SELECT topic, partition, "offset", action, detail, at FROM `+t.rejectedTable()+
		` ORDER BY at DESC, topic, partition, "offset" LIMIT $1`, max(limit, 0))
	if err != nil {
		return out, fmt.Errorf("tracker: rejected: %w", err)
	}
	out.Latest, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Rejection, error) {
		var r Rejection
		err := row.Scan(&r.Topic, &r.Partition, &r.Offset, &r.Action, &r.Detail, &r.At)
		return r, err
	})
	if err != nil {
		return out, fmt.Errorf("tracker: rejected: %w", err)
	}
	return out, nil
}

// reject records rs (a position already recorded is left as it is), then counts and
// logs those it added.
func (t *Tracker) reject(ctx context.Context, rs []Rejection) error {
	if len(rs) == 0 {
		return nil
	}
	var (
		topics, actions, details []string
		parts                    []int32
		offsets                  []int64
	)
	for _, r := range rs {
		detail, _ := storable(r.Detail, MaxErrorBytes)
		topics, parts, offsets = append(topics, r.Topic), append(parts, r.Partition), append(offsets, r.Offset)
		actions, details = append(actions, r.Action), append(details, detail)
	}
	rows, err := t.db.Query(ctx, `INSERT INTO `+t.rejectedTable()+` (topic, partition, "offset", action, detail)
		SELECT * FROM unnest($1::text[], $2::integer[], $3::bigint[], $4::text[], $5::text[])
		ON CONFLICT (topic, partition, "offset") DO NOTHING
		RETURNING topic, partition, "offset", action, detail`, topics, parts, offsets, actions, details)
	if err != nil {
		return fmt.Errorf("tracker: record %d rejected records: %w", len(rs), err)
	}
	added, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Rejection, error) {
		var r Rejection
		err := row.Scan(&r.Topic, &r.Partition, &r.Offset, &r.Action, &r.Detail)
		return r, err
	})
	if err != nil {
		return fmt.Errorf("tracker: record %d rejected records: %w", len(rs), err)
	}
	for _, r := range added {
		switch r.Action {
		case ActionEscaped:
			t.inst.escaped.Add(ctx, 1)
		case ActionRefused:
			reason, _, _ := strings.Cut(r.Detail, ":")
			t.inst.refused.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", reason)))
		default:
			t.inst.skipped.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", "unstorable")))
		}
		t.log.LogAttrs(ctx, slog.LevelWarn, "tracker: record not indexed as it is",
			slog.String("topic", r.Topic), slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset),
			slog.String("action", r.Action), slog.String("detail", r.Detail))
	}
	return nil
}

// escapedRejection is the rejection of e, whose fields e.escaped were escaped or cut.
func escapedRejection(e entry) Rejection {
	return Rejection{Topic: e.topic, Partition: e.partition, Offset: e.offset, Action: ActionEscaped,
		Detail: "escaped or cut: " + strings.Join(e.escaped, ", ")}
}

// refused reports whether err is Postgres refusing a row's values (a data exception, or
// a value past a limit such as an index entry's size): the same row fails every time.
func refused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "54"))
}

// insertEach inserts entries, one statement for all of them, or, when Postgres refuses
// the statement for a value, one per entry: the entries refused again are returned as
// skipped rejections and left out of stored.
func (t *Tracker) insertEach(ctx context.Context, entries []entry) (fresh, stored []entry, skipped []Rejection, err error) {
	fresh, err = t.insert(ctx, entries)
	if err == nil || !refused(err) {
		return fresh, entries, nil, err
	}
	fresh = nil
	for _, e := range entries {
		f, err := t.insert(ctx, []entry{e})
		switch {
		case err == nil:
			fresh, stored = append(fresh, f...), append(stored, e)
		case refused(err):
			skipped = append(skipped, Rejection{Topic: e.topic, Partition: e.partition, Offset: e.offset,
				Action: ActionSkipped, Detail: "postgres refused the row: " + err.Error()})
		default:
			return nil, nil, nil, err
		}
	}
	return fresh, stored, skipped, nil
}

// skipBatch records that the batch e names decompresses past the client's bound, so it
// is not indexed, and moves cl past it.
func (t *Tracker) skipBatch(ctx context.Context, cl *kgo.Client, e *kgo.ErrDecompressTooLarge) error {
	err := t.reject(ctx, []Rejection{{Topic: e.Topic, Partition: e.Partition, Offset: e.Offset, Action: ActionSkipped,
		Detail: fmt.Sprintf("the batch of offsets %d to %d decompresses past the client's bound", e.Offset, e.NextOffset-1)}})
	if err != nil {
		return err
	}
	consumer.SkipBatch(cl, e)
	return nil
}
