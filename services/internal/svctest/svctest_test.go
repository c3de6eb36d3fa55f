package svctest_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/internal/svctest"
)

// flushAtCommit makes the transaction write "<name>:flushed" into the log table with its
// COMMIT (consumer.AtCommitFunc, once per name).
func flushAtCommit(ctx context.Context, tx pgx.Tx, name string) error {
	return consumer.AtCommitFunc(ctx, tx, name, func(b *pgx.Batch) {
		b.Queue(`INSERT INTO log (entry) VALUES ($1)`, name+":flushed")
	})
}

// logDB returns a database with an empty log table and a function that reads its
// entries in order.
func logDB(t *testing.T) (*pgxpool.Pool, func() []string) {
	t.Helper()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE log (n serial PRIMARY KEY, entry text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return pool, func() []string {
		rows, err := pool.Query(ctx, `SELECT entry FROM log ORDER BY n`)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
}

// InBatch runs the handlers in order in one transaction, then before, then the hooks the
// handlers added, and commits; a failure rolls all of it back.
func TestInBatch(t *testing.T) {
	pool, entries := logDB(t)
	h := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if ev.Subject == "fail" {
			return errors.New("handler failed")
		}
		if err := flushAtCommit(ctx, tx, "batch"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO log (entry) VALUES ($1)`, ev.Subject)
		return err
	}
	ev := func(subject string) event.Event {
		return event.Event{ID: subject, Subject: subject}
	}
	var sawBefore []string
	before := func() { sawBefore = entries() } // another connection: nothing committed yet
	if err := svctest.InBatch(pool, h, before, ev("o-1"), ev("o-2")); err != nil {
		t.Fatal(err)
	}
	if want := []string{"o-1", "o-2", "batch:flushed"}; !slices.Equal(entries(), want) || len(sawBefore) != 0 {
		t.Fatalf("log %q (before saw %q), want %q (before saw nothing)", entries(), sawBefore, want)
	}
	if err := svctest.InBatch(pool, h, nil, ev("o-3"), ev("fail")); err == nil {
		t.Fatal("InBatch with a failing handler: nil error")
	}
	if want := []string{"o-1", "o-2", "batch:flushed"}; !slices.Equal(entries(), want) {
		t.Fatalf("after a failed batch: log %q, want %q", entries(), want)
	}
}

// The events are the order service's, for the order, with the type and attempt asked.
func TestEvents(t *testing.T) {
	out := svctest.Outcome(t, events.OrderRejected, "o-1")
	cancel := svctest.CancelRequested(t, "o-2", 3)
	if out.Source != events.SourceOrder || out.Type != events.OrderRejected || out.Subject != "o-1" ||
		cancel.Source != events.SourceOrder || cancel.Type != events.OrderCancelRequested || cancel.Subject != "o-2" {
		t.Fatalf("events %+v, %+v", out, cancel)
	}
	var p events.OrderCancelRequestedV1
	if err := cancel.DecodeData(&p); err != nil || p.OrderID != "o-2" || p.Attempt != 3 {
		t.Fatalf("cancel payload %+v, %v", p, err)
	}
}

// Sum adds up one counter by the attribute's value and ignores other counters.
func TestMeterSum(t *testing.T) {
	m := svctest.NewMeter()
	meter := m.Provider.Meter("test")
	c, err := meter.Int64Counter("fixes")
	if err != nil {
		t.Fatal(err)
	}
	other, err := meter.Int64Counter("other")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kind := func(k string) metric.AddOption { return metric.WithAttributes(attribute.String("kind", k)) }
	c.Add(ctx, 1, kind("a"))
	c.Add(ctx, 2, kind("a"))
	c.Add(ctx, 1, kind("b"))
	other.Add(ctx, 5, kind("a"))
	got := m.Sum(t, "fixes", "kind")
	if len(got) != 2 || got["a"] != 3 || got["b"] != 1 {
		t.Fatalf("Sum = %v, want a:3 b:1", got)
	}
}

// InCountedBatch counts the handlers' round trips (a pgx batch is one), not the hooks',
// and commits what they wrote.
func TestInCountedBatch(t *testing.T) {
	pool, entries := logDB(t)
	h := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if _, err := tx.Exec(ctx, `INSERT INTO log (entry) VALUES ($1)`, ev.Subject); err != nil {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO log (entry) VALUES ($1)`, ev.Subject+":batch")
		b.Queue(`SELECT 1`)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if _, ok := consumer.TxValue(ctx, tx, "probe", func() any { return true }); !ok {
			return errors.New("no consumer transaction for the counting transaction")
		}
		return flushAtCommit(ctx, tx, ev.Subject)
	}
	n, err := svctest.InCountedBatch(pool, h,
		apptest.NewEvent(t, events.SourceOrder, events.OrderCreated, "a", events.OrderOutcomeV1{OrderID: "a"}),
		apptest.NewEvent(t, events.SourceOrder, events.OrderCreated, "b", events.OrderOutcomeV1{OrderID: "b"}))
	if err != nil || n != 4 {
		t.Fatalf("InCountedBatch = %d, %v; want 4 round trips (2 per handler)", n, err)
	}
	if want, got := []string{"a", "a:batch", "b", "b:batch", "a:flushed", "b:flushed"}, entries(); !slices.Equal(got, want) {
		t.Fatalf("log = %q, want %q", got, want)
	}
}
