package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
)

func TestMigrate(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA billing"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		opts    []outbox.Option
		tables  []string
		wantErr error
	}{
		{"default", nil, []string{"choreo_outbox", "choreo_outbox_dead"}, nil},
		{"custom", []outbox.Option{outbox.WithTable("events_out")}, []string{"events_out", "events_out_dead"}, nil},
		{"schema-qualified", []outbox.Option{outbox.WithTable("billing.outbox")}, []string{"billing.outbox", "billing.outbox_dead"}, nil},
		{"upper case", []outbox.Option{outbox.WithTable("Outbox")}, nil, outbox.ErrInvalidTable},
		{"injection", []outbox.Option{outbox.WithTable("x; DROP TABLE y")}, nil, outbox.ErrInvalidTable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ob, err := outbox.New(tc.opts...)
			if tc.wantErr != nil {
				// An invalid name is refused by the constructor.
				if !errors.Is(err, tc.wantErr) || ob != nil {
					t.Fatalf("New with a bad table: got %v, %v, want %v", ob, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Concurrent migrations of the same tables must all succeed.
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for i := range errs {
				wg.Go(func() { errs[i] = migrate.Up(ctx, pool, migrate.WithOutboxTable(ob.TableName())) })
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatalf("Up: %v", err)
				}
			}
			for _, table := range tc.tables {
				var n int
				if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
					t.Fatalf("table %s: %v", table, err)
				}
			}
		})
	}
}

func TestEnqueue(t *testing.T) {
	pool := db(t)
	ctx := context.Background()
	ob := newOutbox(t)

	rec := tracetest.NewSpanRecorder()
	tp := trace.NewTracerProvider(trace.WithSpanProcessor(rec))
	spanCtx, span := tp.Tracer("test").Start(ctx, "POST /orders")
	sc := span.SpanContext()

	a, b := newEvent(t, "order-1", 1), newEvent(t, "order-1", 2).CausedBy(newEvent(t, "x", 0))
	if err := pgx.BeginFunc(spanCtx, pool, func(tx pgx.Tx) error {
		return ob.Enqueue(spanCtx, tx, "orders.events", a, b)
	}); err != nil {
		t.Fatal(err)
	}
	span.End()

	rows, err := pool.Query(ctx, "SELECT topic, key, headers, payload FROM choreo_outbox ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	type stored struct {
		topic, key string
		headers    [][2]string
		payload    []byte
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stored, error) {
		var s stored
		var h []byte
		err := r.Scan(&s.topic, &s.key, &h, &s.payload)
		if err == nil {
			err = json.Unmarshal(h, &s.headers)
		}
		return s, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("stored %d rows, want 2", len(got))
	}
	for i, want := range []event.Event{a, b} {
		s := got[i]
		h := map[string]string{}
		for _, p := range s.headers {
			h[p[0]] = p[1]
		}
		if s.topic != "orders.events" || s.key != want.Subject || string(s.payload) != string(want.Data) {
			t.Errorf("row %d: topic %q key %q payload %s", i, s.topic, s.key, s.payload)
		}
		if h[event.HeaderID] != want.ID || h[event.HeaderType] != want.Type || h[event.HeaderCausationID] != want.CausationID {
			t.Errorf("row %d: CloudEvents headers %v do not match the event", i, h)
		}
		// The current span's context is stored, so the trace continues through the relay.
		if tp := h["traceparent"]; tp != "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01" {
			t.Errorf("row %d: traceparent %q, want the enqueuing span %s", i, tp, sc.SpanID())
		}
	}

	// Rolled back: nothing stored. Invalid event: an error and nothing stored.
	_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := ob.Enqueue(ctx, tx, "orders.events", newEvent(t, "order-2", 1)); err != nil {
			t.Fatal(err)
		}
		return errors.New("rollback")
	})
	bad := newEvent(t, "order-3", 1)
	bad.Data = []byte("{not json")
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return ob.Enqueue(ctx, tx, "orders.events", newEvent(t, "order-3", 1), bad)
	})
	if !errors.Is(err, event.ErrMalformed) {
		t.Errorf("invalid event: got %v, want event.ErrMalformed", err)
	}
	if n := count(t, pool, "choreo_outbox"); n != 2 {
		t.Errorf("%d rows after rollback and invalid event, want 2", n)
	}
}

// Queue stores the rows with a batch's other statements: in the batch's implicit
// transaction, so a failing statement of the batch stores none of them.
func TestQueue(t *testing.T) {
	pool := db(t)
	ctx := context.Background()
	ob := newOutbox(t)
	if _, err := pool.Exec(ctx, "CREATE TABLE queue_entity (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}

	a, b := newEvent(t, "e-1", 1), newEvent(t, "e-1", 2)
	batch := &pgx.Batch{}
	batch.Queue("INSERT INTO queue_entity (id) VALUES ('e-1')")
	if err := ob.Queue(ctx, batch, "entities.events", a, b); err != nil {
		t.Fatal(err)
	}
	if err := pool.SendBatch(ctx, batch).Close(); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, "SELECT topic, key, convert_from(payload, 'UTF8') FROM choreo_outbox ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	type stored struct{ Topic, Key, Payload string }
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[stored])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("stored %d rows, want 2", len(got))
	}
	for i, want := range []event.Event{a, b} {
		if got[i].Topic != "entities.events" || got[i].Key != want.Subject || got[i].Payload != string(want.Data) {
			t.Errorf("row %d: %+v, want key %q payload %s", i, got[i], want.Subject, want.Data)
		}
	}

	// The entity's insert fails (duplicate key): its event is not stored either.
	batch = &pgx.Batch{}
	batch.Queue("INSERT INTO queue_entity (id) VALUES ('e-1')")
	if err := ob.Queue(ctx, batch, "entities.events", newEvent(t, "e-1", 3)); err != nil {
		t.Fatal(err)
	}
	if err := pool.SendBatch(ctx, batch).Close(); err == nil {
		t.Fatal("duplicate entity: the batch succeeded")
	}
	// A statement after the queued rows fails: the rows, already inserted when it ran,
	// are rolled back with the batch's implicit transaction.
	batch = &pgx.Batch{}
	if err := ob.Queue(ctx, batch, "entities.events", newEvent(t, "e-3", 1)); err != nil {
		t.Fatal(err)
	}
	batch.Queue("INSERT INTO queue_entity (id) VALUES ('e-1')")
	if err := pool.SendBatch(ctx, batch).Close(); err == nil {
		t.Fatal("duplicate entity after the events: the batch succeeded")
	}
	// An invalid event fails Queue and queues nothing.
	bad := newEvent(t, "e-2", 1)
	bad.Data = []byte("{not json")
	batch = &pgx.Batch{}
	if err := ob.Queue(ctx, batch, "entities.events", bad); !errors.Is(err, event.ErrMalformed) {
		t.Errorf("invalid event: got %v, want event.ErrMalformed", err)
	}
	if batch.Len() != 0 {
		t.Errorf("invalid event: %d statements queued, want 0", batch.Len())
	}
	if n := count(t, pool, "choreo_outbox"); n != 2 {
		t.Errorf("%d rows after the failed batch, want 2", n)
	}
}
