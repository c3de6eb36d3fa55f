package consumer

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
)

// outboxInserts is a pgx tracer counting the INSERTs into the outbox table.
type outboxInserts struct{ n atomic.Int64 }

func (c *outboxInserts) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "INSERT INTO "+outbox.DefaultTable+" ") {
		c.n.Add(1)
	}
	return ctx
}

func (c *outboxInserts) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *outboxInserts) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *outboxInserts) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: d.SQL})
}

func (c *outboxInserts) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// The outbox rows a transaction run by the chain enqueues are written in one INSERT just
// before its commit, on both paths, with ids in the order of the Enqueue calls (handlers
// in offset order, calls in order within a handler) and after the handlers' own writes.
// Enqueue on another transaction, or outside the chain, writes at once, and a batch that
// fails leaves no row.
func TestOutboxRowsWrittenOncePerTransaction(t *testing.T) {
	ctx := context.Background()
	inserts := new(outboxInserts)
	pool := testenv.PostgresWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = inserts })
	migrateTestDB(t, pool)
	ob := migratedOutbox(t, pool)
	brokers := testenv.Kafka(t)
	topic := testenv.Name(t, "in")

	var failAt atomic.Value // the event id whose handler fails after enqueueing
	failAt.Store("")
	handler := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effects (event_id, key, seq) VALUES ($1, $2, 0)`, ev.ID, ev.Subject); err != nil {
			return err
		}
		for _, typ := range []string{"test.first", "test.second"} {
			next, err := event.New("test", typ, ev.Subject, nil)
			if err != nil {
				return err
			}
			if err := ob.Enqueue(ctx, tx, "out", next.CausedBy(ev)); err != nil {
				return err
			}
		}
		if failAt.Load() == ev.ID {
			return Permanent(errors.New("test: handler fails after enqueueing"))
		}
		return nil
	}
	std := StandardConfig{DB: pool, DeadLetter: newProducer(t, brokers), Name: "flush", Handler: handler, Retry: RetryConfig{MaxAttempts: 1}}
	single, err := Standard(std)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := StandardBatch(std)
	if err != nil {
		t.Fatal(err)
	}
	msgs := func(keys ...string) ([]*Message, []string) {
		var ms []*Message
		var ids []string
		for i, k := range keys {
			r := eventRecord(t, topic, "test.step", k, seqPayload{Seq: i})
			r.Offset = int64(i)
			ms = append(ms, &Message{Record: r, Group: "g"})
			ev, err := event.FromRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ev.ID)
		}
		return ms, ids
	}
	// causes returns the causation id and type of every outbox row, in id order, and
	// deletes them.
	causes := func() []string {
		t.Helper()
		rows, err := pool.Query(ctx, `DELETE FROM `+outbox.DefaultTable+` RETURNING id, headers`)
		if err != nil {
			t.Fatal(err)
		}
		type row struct {
			id int64
			s  string
		}
		var got []row
		for rows.Next() {
			var (
				id int64
				hs [][2]string
			)
			if err := rows.Scan(&id, &hs); err != nil {
				t.Fatal(err)
			}
			var cause, typ string
			for _, h := range hs {
				switch h[0] {
				case event.HeaderCausationID:
					cause = h[1]
				case event.HeaderType:
					typ = h[1]
				}
			}
			got = append(got, row{id, cause + " " + typ})
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(got))
		// DELETE ... RETURNING has no order: sort by id.
		slices.SortFunc(got, func(a, b row) int { return cmp.Compare(a.id, b.id) })
		for i, r := range got {
			out[i] = r.s
		}
		return out
	}
	want := func(ids []string) []string {
		var w []string
		for _, id := range ids {
			w = append(w, id+" test.first", id+" test.second")
		}
		return w
	}
	check := func(name string, got, want []string, statements int64) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: outbox rows in id order\n got %q\nwant %q", name, got, want)
		}
		if n := inserts.n.Swap(0); n != statements {
			t.Errorf("%s: %d INSERTs into the outbox, want %d", name, n, statements)
		}
	}

	// A batch, an entity repeating: one INSERT for the six rows, in order.
	ms, ids := msgs("a", "b", "a")
	if err := batch(ctx, ms); err != nil {
		t.Fatal(err)
	}
	check("batch", causes(), want(ids), 1)
	if n := count(t, pool, `SELECT count(*) FROM effects`); n != 3 {
		t.Errorf("batch: %d effects, want 3", n)
	}

	// One record: one INSERT for its two rows.
	ms, ids = msgs("c")
	if err := single(ctx, ms[0]); err != nil {
		t.Fatal(err)
	}
	check("one record", causes(), want(ids), 1)

	// A handler failing after it enqueued: the batch leaves no row.
	ms, ids = msgs("d", "e")
	failAt.Store(ids[1])
	if err := batch(ctx, ms); err == nil {
		t.Fatal("batch with a failing handler succeeded")
	}
	failAt.Store("")
	check("failed batch", causes(), nil, 0)

	// Outside the chain, and on another transaction inside a handler, Enqueue writes at
	// once: the row is visible in its transaction before the commit.
	ev, err := event.New("test", "test.plain", "p", nil)
	if err != nil {
		t.Fatal(err)
	}
	visible := func(ctx context.Context, tx pgx.Tx) error {
		if err := ob.Enqueue(ctx, tx, "out", ev); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+outbox.DefaultTable).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			t.Errorf("Enqueue outside the chain's transaction: %d rows visible in its transaction, want 1", n)
		}
		return errors.New("roll back")
	}
	// (Outbox.InTx runs its transaction like the chain, deferring the rows: outbox's
	// TestInTxWritesRowsWithTheCommit.)
	_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return visible(ctx, tx) })
	other := StandardConfig{DB: pool, DeadLetter: std.DeadLetter, Name: "other", Retry: RetryConfig{MaxAttempts: 1},
		Handler: func(ctx context.Context, _ pgx.Tx, _ event.Event) error {
			_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return visible(ctx, tx) })
			return nil
		}}
	h, err := Standard(other)
	if err != nil {
		t.Fatal(err)
	}
	ms, _ = msgs("q")
	if err := h(ctx, ms[0]); err != nil {
		t.Fatal(err)
	}
	check("other transaction", causes(), nil, 2)
}
