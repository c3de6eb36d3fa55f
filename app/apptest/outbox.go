package apptest

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/outbox"
)

// RowsQuerier runs a query returning rows; *pgxpool.Pool and *pgx.Conn satisfy it.
type RowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// OutboxRecords returns the rows waiting in the outbox table of db (default
// outbox.DefaultTable), oldest first, as the records the relay would publish: topic,
// key, headers and value. It lets a handler test see what a transaction enqueued
// without running a relay.
func OutboxRecords(t testing.TB, db RowsQuerier, table string) []*kgo.Record {
	t.Helper()
	if table == "" {
		table = outbox.DefaultTable
	}
	rows, err := db.Query(context.Background(), fmt.Sprintf("SELECT topic, key, headers, payload FROM %s ORDER BY id", table))
	if err != nil {
		t.Fatalf("apptest: read %s: %v", table, err)
	}
	recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*kgo.Record, error) {
		var (
			topic, key string
			headers    [][2]string // stored as a JSON array of [key, value] pairs
			value      []byte
		)
		if err := row.Scan(&topic, &key, &headers, &value); err != nil {
			return nil, err
		}
		rec := &kgo.Record{Topic: topic, Key: []byte(key), Value: value}
		for _, h := range headers {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h[0], Value: []byte(h[1])})
		}
		return rec, nil
	})
	if err != nil {
		t.Fatalf("apptest: read %s: %v", table, err)
	}
	return recs
}

// OutboxEvents returns the events waiting in the outbox table of db (see
// OutboxRecords), oldest first. It fails t when one does not decode or is bound for
// another topic than topic.
func OutboxEvents(t testing.TB, db RowsQuerier, table, topic string) []event.Event {
	t.Helper()
	var out []event.Event
	for _, rec := range OutboxRecords(t, db, table) {
		ev, err := event.FromRecord(rec)
		if err != nil {
			t.Fatalf("apptest: outbox row for %s does not decode: %v", rec.Key, err)
		}
		if rec.Topic != topic {
			t.Fatalf("event %s enqueued for topic %s, want %s", ev.Type, rec.Topic, topic)
		}
		out = append(out, ev)
	}
	return out
}
