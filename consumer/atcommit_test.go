package consumer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
)

// atCommitDB returns newDB's database with the outbox and an accounts table (balance
// never below 0), on a pool whose round trips tr records.
func atCommitDB(t *testing.T) (*pgxpool.Pool, *testenv.RoundTrips, *outbox.Outbox) {
	t.Helper()
	ctx := context.Background()
	tr := &testenv.RoundTrips{}
	pool := testenv.PostgresWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tr })
	migrateTestDB(t, pool)
	ob := migratedOutbox(t, pool)
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0));
INSERT INTO accounts VALUES ('a', 100)`); err != nil {
		t.Fatal(err)
	}
	tr.Take()
	return pool, tr, ob
}

// addTo queues balance += d on account a.
func addTo(d int) func(b *pgx.Batch) {
	return func(b *pgx.Batch) { b.Queue(`UPDATE accounts SET balance = balance + $1 WHERE id = 'a'`, d) }
}

// atCommitState reports the balance of account a, the idempotency records and the outbox
// rows.
func atCommitState(t *testing.T, pool *pgxpool.Pool) (balance, records, rows int) {
	t.Helper()
	return count(t, pool, `SELECT balance FROM accounts WHERE id = 'a'`),
		count(t, pool, `SELECT count(*) FROM `+idempotency.DefaultTable),
		count(t, pool, `SELECT count(*) FROM `+outbox.DefaultTable)
}

// enqueue enqueues one outgoing event caused by ev.
func enqueue(ctx context.Context, ob *outbox.Outbox, tx pgx.Tx, ev event.Event) error {
	next, err := event.New("test", "test.next", ev.Subject, nil)
	if err != nil {
		return err
	}
	return ob.Enqueue(ctx, tx, "out", next.CausedBy(ev))
}

// In a consumer transaction, AtCommit's statements go out with the outbox rows and the
// COMMIT: two round trips where tx.Exec takes three, the statements placed before or
// after the outbox rows as the first AtCommit came before or after the first Enqueue.
func TestAtCommitRidesTheCommit(t *testing.T) {
	pool, tr, ob := atCommitDB(t)
	ctx := context.Background()

	exec := idempotent(t, IdempotentConfig{DB: pool, Name: "exec"}, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + 1 WHERE id = 'a'`); err != nil {
			return err
		}
		return enqueue(ctx, ob, tx, ev)
	})
	first := idempotent(t, IdempotentConfig{DB: pool, Name: "first"}, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if err := AtCommit(ctx, tx, addTo(10)); err != nil {
			return err
		}
		if err := AtCommit(ctx, tx, addTo(100)); err != nil {
			return err
		}
		return enqueue(ctx, ob, tx, ev)
	})
	after := idempotent(t, IdempotentConfig{DB: pool, Name: "after"}, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if err := enqueue(ctx, ob, tx, ev); err != nil {
			return err
		}
		return AtCommit(ctx, tx, addTo(1000))
	})
	for _, c := range []struct {
		name    string
		h       Handler
		balance int
		trips   []string
	}{
		{"tx.Exec", exec, 101, []string{"begin; insert", "update", "insert; commit"}},
		{"AtCommit before Enqueue", first, 211, []string{"begin; insert", "update; update; insert; commit"}},
		{"AtCommit after Enqueue", after, 1211, []string{"begin; insert", "insert; update; commit"}},
	} {
		tr.Take()
		if err := c.h(ctx, decoded(t, "k", 1)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		trips := tr.Take()
		t.Logf("%s: %d round trips %q", c.name, len(trips), trips)
		if !slices.Equal(trips, c.trips) {
			t.Errorf("%s: round trips %q, want %q", c.name, trips, c.trips)
		}
		if balance, _, _ := atCommitState(t, pool); balance != c.balance {
			t.Errorf("%s: balance %d, want %d", c.name, balance, c.balance)
		}
	}
	if _, records, rows := atCommitState(t, pool); records != 3 || rows != 3 {
		t.Errorf("%d idempotency records and %d outbox rows, want 3 and 3", records, rows)
	}
}

var errInsufficientFunds = errors.New("test: insufficient funds")

// debit queues balance -= d on account a if the balance covers it, with a callback that
// fails with errInsufficientFunds (Permanent) when no row changed.
func debit(d int) func(b *pgx.Batch) {
	return func(b *pgx.Batch) {
		b.Queue(`UPDATE accounts SET balance = balance - $1 WHERE id = 'a' AND balance >= $1`, d).Exec(
			func(tag pgconn.CommandTag) error {
				if tag.RowsAffected() != 1 {
					return Permanent(errInsufficientFunds)
				}
				return nil
			})
	}
}

// A statement with a callback is sent, with the AtCommit statements and outbox rows
// queued before it, in a round trip before the COMMIT's, so that the callback's error
// rolls everything back: the record is dead-lettered as permanent, errors.Is finds the
// callback's sentinel, and nothing of the transaction is committed.
func TestAtCommitCallbackFailsTheCommit(t *testing.T) {
	pool, tr, ob := atCommitDB(t)
	ctx := context.Background()
	brokers := testenv.Kafka(t)
	src := testenv.Topic(t, brokers, 1)
	dlq := testenv.Topic(t, brokers, 1)

	amount := 30
	h, err := Standard(StandardConfig{DB: pool, DeadLetter: newProducer(t, brokers), Name: "debit", Retry: RetryConfig{MaxAttempts: 3},
		Handler: func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			if err := AtCommit(ctx, tx, addTo(1)); err != nil { // no callback
				return err
			}
			if err := AtCommit(ctx, tx, debit(amount)); err != nil {
				return err
			}
			return enqueue(ctx, ob, tx, ev)
		}})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(seq int) *Message {
		return &Message{Record: eventRecord(t, src, "test.step", "k", seqPayload{Seq: seq}), Group: "g",
			deadLetterTopic: func(string) string { return dlq }}
	}

	// The callback passes: both statements in a round trip of their own, then the outbox
	// row with the COMMIT.
	tr.Take()
	if err := h(ctx, msg(1)); err != nil {
		t.Fatal(err)
	}
	trips := tr.Take()
	t.Logf("with a callback: %d round trips %q", len(trips), trips)
	if want := []string{"begin; insert", "update; update", "insert; commit"}; !slices.Equal(trips, want) {
		t.Errorf("round trips %q, want %q", trips, want)
	}
	if balance, records, rows := atCommitState(t, pool); balance != 71 || records != 1 || rows != 1 {
		t.Fatalf("after a debit of 30: balance %d, %d records, %d outbox rows; want 71, 1, 1", balance, records, rows)
	}

	// The callback fails: dead-lettered at the first attempt, nothing committed.
	amount = 1000
	m := msg(2)
	if err := h(ctx, m); err != nil {
		t.Fatalf("dead-lettered record: %v", err)
	}
	if m.Outcome != OutcomeDeadLettered || m.Attempt != 1 {
		t.Errorf("outcome %q after %d attempts, want %q after 1", m.Outcome, m.Attempt, OutcomeDeadLettered)
	}
	if !errors.Is(m.DeadLetterCause, errInsufficientFunds) || Retryable(m.DeadLetterCause) {
		t.Errorf("cause %v: want errInsufficientFunds, not retryable", m.DeadLetterCause)
	}
	if !strings.Contains(m.DeadLetterCause.Error(), "consumer: AtCommit: ") {
		t.Errorf("cause %q does not name AtCommit", m.DeadLetterCause)
	}
	if d := readTopic(t, brokers, dlq, 1)[0]; header(d, HeaderDLQReason) != ReasonPermanent {
		t.Errorf("dead letter reason %q, want %q", header(d, HeaderDLQReason), ReasonPermanent)
	}
	if balance, records, rows := atCommitState(t, pool); balance != 71 || records != 1 || rows != 1 {
		t.Errorf("after a failed debit: balance %d, %d records, %d outbox rows; want 71, 1, 1 (nothing committed)", balance, records, rows)
	}
}

// A statement that fails in the COMMIT's round trip (here a CHECK violation) stops the
// COMMIT: nothing of the transaction is committed and the handling fails with the
// statement's error.
func TestAtCommitFailingStatementRollsBack(t *testing.T) {
	pool, tr, ob := atCommitDB(t)
	ctx := context.Background()
	h := idempotent(t, IdempotentConfig{DB: pool}, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if err := enqueue(ctx, ob, tx, ev); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO effects (event_id, key, seq) VALUES ($1, 'k', 1)`, ev.ID); err != nil {
			return err
		}
		return AtCommit(ctx, tx, addTo(-1000))
	})
	tr.Take()
	err := h(ctx, decoded(t, "k", 1))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || !strings.Contains(err.Error(), "consumer: AtCommit: ") {
		t.Fatalf("err %v, want AtCommit's check violation (23514)", err)
	}
	t.Logf("failing statement: round trips %q", tr.Take())
	if balance, records, rows := atCommitState(t, pool); balance != 100 || records != 0 || rows != 0 {
		t.Errorf("balance %d, %d records, %d outbox rows; want 100, 0, 0", balance, records, rows)
	}
	if n := count(t, pool, `SELECT count(*) FROM effects`); n != 0 {
		t.Errorf("%d effects committed, want 0", n)
	}
}

// In a StandardBatch transaction the AtCommit statements of every handler accumulate, in
// offset order, and go out with the one COMMIT.
func TestAtCommitBatch(t *testing.T) {
	pool, tr, _ := atCommitDB(t)
	ctx := context.Background()
	brokers := testenv.Kafka(t)
	topic := testenv.Name(t, "in")
	h, err := StandardBatch(StandardConfig{DB: pool, DeadLetter: newProducer(t, brokers), Name: "batch", Retry: RetryConfig{MaxAttempts: 1},
		Handler: func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			var p seqPayload
			if err := ev.DecodeData(&p); err != nil {
				return err
			}
			return AtCommit(ctx, tx, func(b *pgx.Batch) {
				b.Queue(`INSERT INTO effects (event_id, key, seq) VALUES ($1, $2, $3)`, ev.ID, ev.Subject, p.Seq)
				b.Queue(`UPDATE accounts SET balance = balance * 2 + $1 WHERE id = 'a'`, p.Seq)
			})
		}})
	if err != nil {
		t.Fatal(err)
	}
	var ms []*Message
	for i, k := range []string{"x", "y", "x"} {
		r := eventRecord(t, topic, "test.step", k, seqPayload{Seq: i + 1})
		r.Offset = int64(i)
		ms = append(ms, &Message{Record: r, Group: "g"})
	}
	tr.Take()
	if err := h(ctx, ms); err != nil {
		t.Fatal(err)
	}
	trips := tr.Take()
	t.Logf("batch of 3: %d round trips %q", len(trips), trips)
	want := strings.Repeat("insert; update; ", 3) + "commit"
	if len(trips) != 2 || !strings.HasPrefix(trips[0], "begin") || trips[1] != want {
		t.Errorf("round trips %q, want [begin; claim] and [%s]", trips, want)
	}
	// In order: ((100*2+1)*2+2)*2+3.
	if balance, records, _ := atCommitState(t, pool); balance != 811 || records != 3 {
		t.Errorf("balance %d, %d records; want 811 (statements in offset order), 3", balance, records)
	}
	rows, err := pool.Query(ctx, `SELECT seq FROM effects ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seqs, []int{1, 2, 3}) {
		t.Errorf("effects in id order %v, want [1 2 3]", seqs)
	}
}

// Outside a consumer transaction AtCommit sends at once, in one round trip: the write is
// visible to the transaction's next statement, and a callback's error is returned.
func TestAtCommitOutsideConsumer(t *testing.T) {
	pool, tr, _ := atCommitDB(t)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		tr.Take()
		if err := AtCommit(ctx, tx, func(b *pgx.Batch) {
			addTo(5)(b)
			addTo(5)(b)
		}); err != nil {
			return err
		}
		if trips := tr.Take(); !slices.Equal(trips, []string{"update; update"}) {
			t.Errorf("round trips %q, want one with both updates", trips)
		}
		var balance int
		if err := tx.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 'a'`).Scan(&balance); err != nil {
			return err
		}
		if balance != 110 {
			t.Errorf("balance in the transaction %d, want 110", balance)
		}
		if err := AtCommit(ctx, tx, debit(1000)); !errors.Is(err, errInsufficientFunds) {
			t.Errorf("callback's error: %v, want errInsufficientFunds", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if balance, _, _ := atCommitState(t, pool); balance != 110 {
		t.Errorf("balance %d, want 110", balance)
	}
	// A handler's context on another transaction: at once too, visible before the
	// handler's own transaction commits.
	h := idempotent(t, IdempotentConfig{DB: pool}, func(hctx context.Context, _ pgx.Tx, _ event.Event) error {
		return pgx.BeginFunc(hctx, pool, func(tx pgx.Tx) error {
			if err := AtCommit(hctx, tx, addTo(1)); err != nil {
				return err
			}
			var balance int
			if err := tx.QueryRow(hctx, `SELECT balance FROM accounts WHERE id = 'a'`).Scan(&balance); err != nil {
				return err
			}
			if balance != 111 {
				t.Errorf("balance in the handler's other transaction %d, want 111", balance)
			}
			return AtCommit(hctx, tx, func(*pgx.Batch) {}) // nothing queued, nothing sent
		})
	})
	if err := h(ctx, decoded(t, "k", 1)); err != nil {
		t.Fatal(err)
	}
	if balance, _, _ := atCommitState(t, pool); balance != 111 {
		t.Errorf("balance %d, want 111", balance)
	}
	var errs []error
	errs = append(errs, AtCommit(ctx, nil, addTo(1)))
	_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		errs = append(errs, AtCommit(ctx, tx, nil))
		return nil
	})
	for _, err := range errs {
		if !errors.Is(err, ErrInvalidConfig) || Retryable(err) {
			t.Errorf("nil argument: %v, want ErrInvalidConfig, permanent", err)
		}
	}
}
