package apptest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/outbox"
)

// What a handler enqueues comes back from OutboxEvents as the same events, in order,
// on the topic it was enqueued for.
func TestOutboxEventsRoundTrip(t *testing.T) {
	pool := apptest.NewDB(t, "apptest", "CREATE TABLE apptest_marker (id int)")
	ob, err := outbox.New()
	if err != nil {
		t.Fatal(err)
	}
	first := apptest.NewEvent(t, "test", "thing.made", "t-1", map[string]int{"n": 1})
	second := apptest.NewEvent(t, "test", "thing.made", "t-2", map[string]int{"n": 2}).CausedBy(first)
	enqueue := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		return ob.Enqueue(ctx, tx, "things.events", ev)
	}
	apptest.MustHandle(t, pool, enqueue, first)
	apptest.MustHandle(t, pool, enqueue, second)

	got := apptest.OutboxEvents(t, pool, "", "things.events")
	if len(got) != 2 || got[0].ID != first.ID || got[1].ID != second.ID || got[1].CausationID != first.ID {
		t.Fatalf("outbox events %+v, want %s then %s caused by it", got, first.ID, second.ID)
	}
	if n := apptest.DecodeData[map[string]int](t, got[1])["n"]; n != 2 {
		t.Fatalf("payload n = %d, want 2", n)
	}
	recs := apptest.OutboxRecords(t, pool, "")
	if len(recs) != 2 || string(recs[0].Key) != "t-1" || recs[0].Topic != "things.events" || len(recs[0].Headers) == 0 {
		t.Fatalf("outbox records %+v", recs)
	}
}

// A handler run by Handle publishes as in the kit: through an app.OutboxPublisher, the
// event it publishes continues the handled event's saga.
func TestHandlePublishesCausedBy(t *testing.T) {
	pool := apptest.NewDB(t, "apptest", "CREATE TABLE apptest_marker (id int)")
	ob, err := outbox.New()
	if err != nil {
		t.Fatal(err)
	}
	pub := app.OutboxPublisher{Outbox: ob}
	in := apptest.NewEvent(t, "test", "thing.asked", "t-1", nil)
	in.CorrelationID = "saga-1"
	apptest.MustHandle(t, pool, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		return pub.Publish(ctx, tx, "things.events", apptest.NewEvent(t, "test", "thing.made", ev.Subject, nil))
	}, in)
	got := apptest.OutboxEvents(t, pool, "", "things.events")
	if len(got) != 1 || got[0].CausationID != in.ID || got[0].CorrelationID != "saga-1" {
		t.Fatalf("outbox events %+v, want one caused by %s in saga-1", got, in.ID)
	}
}

// Events handled concurrently are all handled, each in its own transaction.
func TestHandleConcurrently(t *testing.T) {
	pool := apptest.NewDB(t, "apptest", "CREATE TABLE apptest_seen (id text PRIMARY KEY)")
	var evs []event.Event
	for i := range 10 {
		evs = append(evs, apptest.NewEvent(t, "test", "thing.made", fmt.Sprintf("t-%d", i), nil))
	}
	apptest.HandleConcurrently(t, pool, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		_, err := tx.Exec(ctx, "INSERT INTO apptest_seen (id) VALUES ($1)", ev.Subject)
		return err
	}, evs...)
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM apptest_seen").Scan(&n); err != nil || n != len(evs) {
		t.Fatalf("%d rows, %v; want %d", n, err, len(evs))
	}
}

// NewDB's database is named after its service and the test, so it can be found while
// the test runs.
func TestNewDBNamedAfterService(t *testing.T) {
	pool := apptest.NewDB(t, "Loyalty-Points", "CREATE TABLE loyalty_marker (id int)")
	var name string
	if err := pool.QueryRow(context.Background(), "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(name, "loyalty_points_t_stnewdbnamedafterservice_") { // the test name's last 24 characters
		t.Fatalf("database %q, want loyalty_points_t_stnewdbnamedafterservice_ and a suffix", name)
	}
}

// A LogBuffer takes concurrent writes whole, and Records decodes only its JSON lines.
func TestLogBuffer(t *testing.T) {
	var b apptest.LogBuffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { fmt.Fprintf(&b, "{\"msg\":\"line\",\"n\":%d}\n", i) })
	}
	wg.Wait()
	fmt.Fprintln(&b, "not json")
	fmt.Fprintln(&b, "null")
	recs := b.Records()
	if len(recs) != 8 {
		t.Fatalf("%d records, want 8:\n%s", len(recs), b.String())
	}
	seen := map[float64]bool{}
	for _, r := range recs {
		if r["msg"] != "line" {
			t.Fatalf("record %v", r)
		}
		seen[r["n"].(float64)] = true
	}
	if len(seen) != 8 || !strings.HasSuffix(b.String(), "not json\nnull\n") {
		t.Fatalf("records %v, text:\n%s", recs, b.String())
	}
}

// Handle claims the event id as the kit's idempotent step does: the same event handled
// twice runs its handler once, and the same id with another payload is key reuse.
func TestHandleClaimsEventIDs(t *testing.T) {
	pool := apptest.NewDB(t, "apptest", "CREATE TABLE apptest_marker (id int)")
	runs := 0
	count := func(context.Context, pgx.Tx, event.Event) error { runs++; return nil }
	ev := apptest.NewEvent(t, "test", "thing.made", "t-1", map[string]int{"n": 1})
	apptest.MustHandle(t, pool, count, ev)
	apptest.MustHandle(t, pool, count, ev)
	if runs != 1 {
		t.Fatalf("handler ran %d times for one event handled twice, want 1", runs)
	}
	changed := ev
	changed.Data = []byte(`{"n":2}`)
	if err := apptest.Handle(pool, count, changed); !errors.Is(err, idempotency.ErrKeyReused) || runs != 1 {
		t.Fatalf("same id, other payload: err %v, runs %d; want idempotency.ErrKeyReused, 1", err, runs)
	}
	other := apptest.NewEvent(t, "test", "thing.made", "t-2", map[string]int{"n": 1})
	apptest.MustHandle(t, pool, count, other)
	if runs != 2 {
		t.Fatalf("handler ran %d times after a second event, want 2", runs)
	}
}
