package consumer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

func decoded(t *testing.T, key string, seq int) *Message {
	t.Helper()
	ev, err := event.New("test", "test.step", key, seqPayload{Seq: seq})
	if err != nil {
		t.Fatal(err)
	}
	return &Message{Group: "g", Event: ev, Decoded: true}
}

func TestIdempotent(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	var calls, woken int
	h := idempotent(t, IdempotentConfig{DB: pool, Name: "seq", AfterCommit: []func(){func() { woken++ }}},
		func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			calls++
			return applySeq(ctx, tx, ev)
		})
	m := decoded(t, "k", 1)

	// First delivery: handled, committed, hooks run.
	if err := h(ctx, m); err != nil || m.Outcome != "" {
		t.Fatalf("first: err %v outcome %q", err, m.Outcome)
	}
	// Redeliveries: skipped.
	for range 2 {
		again := &Message{Group: "g", Event: m.Event, Decoded: true}
		if err := h(ctx, again); err != nil || again.Outcome != OutcomeDuplicate {
			t.Fatalf("duplicate: err %v outcome %q", err, again.Outcome)
		}
	}
	if calls != 1 || woken != 1 || count(t, pool, `SELECT count(*) FROM effects`) != 1 {
		t.Errorf("calls %d, AfterCommit %d, effects %d; want 1 each", calls, woken, count(t, pool, `SELECT count(*) FROM effects`))
	}
	if n := count(t, pool, `SELECT count(*) FROM choreo_idempotency WHERE scope = 'g/seq' AND key = $1`, m.Event.ID); n != 1 {
		t.Errorf("%d idempotency records for scope g/seq", n)
	}

	// Same id, different payload: key reuse, non-retryable, no effect.
	reused := &Message{Group: "g", Event: m.Event, Decoded: true}
	reused.Event.Data = []byte(`{"seq":2}`)
	if err := h(ctx, reused); !errors.Is(err, idempotency.ErrKeyReused) || Retryable(err) {
		t.Fatalf("key reuse: %v", err)
	}

	// Another handler name is another scope: it handles the same event once too.
	other := idempotent(t, IdempotentConfig{DB: pool, Name: "audit"}, func(context.Context, pgx.Tx, event.Event) error { calls++; return nil })
	if err := other(ctx, &Message{Group: "g", Event: m.Event, Decoded: true}); err != nil || calls != 2 {
		t.Fatalf("other scope: err %v calls %d", err, calls)
	}
}

// A failing handler rolls back its writes and its claim, so a redelivery runs it again.
func TestIdempotentRollsBackOnError(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	fail := true
	boom := errors.New("boom")
	h := idempotent(t, IdempotentConfig{DB: pool}, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if err := applySeq(ctx, tx, ev); err != nil {
			return err
		}
		if fail {
			return boom
		}
		return nil
	})
	m := decoded(t, "k", 1)
	if err := h(ctx, m); !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM effects`) + count(t, pool, `SELECT count(*) FROM choreo_idempotency`); n != 0 {
		t.Fatalf("%d rows survived the rollback", n)
	}
	fail = false
	if err := h(ctx, &Message{Group: "g", Event: m.Event, Decoded: true}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM effects`); n != 1 {
		t.Errorf("%d effects after the redelivery, want 1", n)
	}
	if err := h(ctx, &Message{Group: "g"}); err == nil || Retryable(err) {
		t.Errorf("undecoded message: %v, want a permanent error", err)
	}
}

// With Fence, a holder whose lease was superseded cannot commit: its transaction fails
// with lock.ErrStaleToken and writes nothing.
func TestIdempotentFence(t *testing.T) {
	pool := newDB(t)
	rdb, ns := testenv.Redis(t)
	ctx := context.Background()
	locker := newLocker(t, rdb, lock.WithNamespace(ns), lock.WithTTL(time.Minute), lock.WithoutWatchdog())
	stale, err := locker.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Release(ctx)
	// The stale holder "pauses"; its Redis key vanishes (as if expired) and a new holder
	// takes the lock with a higher token.
	if err := rdb.Del(ctx, stale.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	fresh, err := locker.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Release(ctx)
	if fresh.Token() <= stale.Token() {
		t.Fatalf("tokens %d then %d are not increasing", stale.Token(), fresh.Token())
	}
	h := idempotent(t, IdempotentConfig{DB: pool, Fence: true}, applySeq)
	m1 := decoded(t, "k", 1)
	m1.lease = fresh
	if err := h(ctx, m1); err != nil {
		t.Fatal(err)
	}
	m2 := decoded(t, "k", 2)
	m2.lease = stale
	if err := h(ctx, m2); !errors.Is(err, lock.ErrStaleToken) {
		t.Fatalf("stale holder: %v, want lock.ErrStaleToken", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM effects`); n != 1 {
		t.Errorf("%d effects, want only the fresh holder's", n)
	}
}
