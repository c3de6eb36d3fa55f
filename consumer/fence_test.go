package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/internal/fence"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// fenceTrace is a pgx tracer recording, for every statement that checks fences, whether it
// went out alone or in a pgx batch, and the statements of every batch.
type fenceTrace struct {
	mu      sync.Mutex
	alone   int        // fence checks sent as their own query
	queries []string   // every statement sent as its own query
	batches [][]string // the statements of each batch, in order
	args    [][]any    // the arguments of the fence checks, in order
}

func (f *fenceTrace) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, d.SQL)
	if isFence(d.SQL) {
		f.alone++
		f.args = append(f.args, d.Args)
	}
	return ctx
}

// isFence reports whether sql is a fence check (internal/fence).
func isFence(sql string) bool { return sql == fence.CheckSQL || sql == fence.CheckOneSQL }

func (f *fenceTrace) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (f *fenceTrace) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	f.mu.Lock()
	f.batches = append(f.batches, nil)
	f.mu.Unlock()
	return ctx
}

func (f *fenceTrace) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches[len(f.batches)-1] = append(f.batches[len(f.batches)-1], d.SQL)
	if isFence(d.SQL) {
		f.args = append(f.args, d.Args)
	}
}

func (f *fenceTrace) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (f *fenceTrace) reset() {
	f.mu.Lock()
	f.alone, f.queries, f.batches, f.args = 0, nil, nil, nil
	f.mu.Unlock()
}

// fenceInBatches is the number of fence checks sent in a batch right before an
// idempotency claim.
func (f *fenceTrace) fenceInBatches() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, b := range f.batches {
		for i, sql := range b {
			if isFence(sql) && i+1 < len(b) && strings.Contains(b[i+1], `INSERT INTO "`+idempotency.DefaultTable+`"`) {
				n++
			}
		}
	}
	return n
}

// tracedDB is newDB with f as the pool's tracer.
func tracedDB(t *testing.T, f *fenceTrace) *pgxpool.Pool {
	t.Helper()
	pool := testenv.PostgresWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = f })
	migrateTestDB(t, pool)
	return pool
}

// The fence check of a batch is one statement for every lease, in entity order, sent in
// the same round trip as the batch's claim, as for one record. A batch holding one stale
// lease among fresh ones fails with lock.ErrStaleToken naming that lease's key and token
// and rolls everything back: no effect, no idempotency record, no fence row of the fresh
// leases; the newer holder's fence row is untouched. The same batch with fresh leases
// commits and records every token.
func TestBatchFence(t *testing.T) {
	trace := new(fenceTrace)
	pool := tracedDB(t, trace)
	rdb, ns := testenv.Redis(t)
	ctx := context.Background()
	locker := newLocker(t, rdb, lock.WithNamespace(ns), lock.WithTTL(time.Minute), lock.WithoutWatchdog())
	tr, err := IdempotentConfig{DB: pool, Fence: true, Name: "seq"}.resolve(applySeq)
	if err != nil {
		t.Fatal(err)
	}

	// Three entities; the batch lists them out of entity order.
	entities := []string{"c", "a", "b"}
	held, err := locker.AcquireAll(ctx, entities)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.ReleaseAll(ctx, held)
	// b's holder "pauses": its Redis key vanishes and a newer holder of b commits a
	// fenced write first.
	stale := held[1]
	if stale.Entity() != "b" {
		t.Fatalf("AcquireAll returned %q second, want b", stale.Entity())
	}
	if err := rdb.Del(ctx, stale.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	fresh, err := locker.Acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Release(ctx)
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fresh.CheckFence(ctx, tx) }); err != nil {
		t.Fatal(err)
	}

	batch := func(leases []*lock.Lease, seq int) []*Message {
		ms := make([]*Message, len(entities))
		for i, e := range entities {
			ms[i] = decoded(t, e, seq)
			ms[i].Record = &kgo.Record{Offset: int64(10*seq + i)}
			for _, ls := range leases {
				if ls.Entity() == e {
					ms[i].lease = ls
				}
			}
		}
		return ms
	}
	trace.reset()
	err = tr.run(ctx, batch(held, 1), nil, held)
	if !errors.Is(err, lock.ErrStaleToken) {
		t.Fatalf("batch with a stale lease: %v, want lock.ErrStaleToken", err)
	}
	if want := fmt.Sprintf("%q token %d", stale.Key(), stale.Token()); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the stale lease (%s)", err, want)
	}
	if trace.alone != 0 || trace.fenceInBatches() != 1 {
		t.Errorf("fence checks: %d alone, %d leading a claim; want 0 and 1 (batches %q)", trace.alone, trace.fenceInBatches(), trace.batches)
	}
	if len(trace.args) != 1 {
		t.Fatalf("%d fence checks, want 1", len(trace.args))
	}
	wantKeys := []string{held[0].Key(), stale.Key(), held[2].Key()}
	if got := fmt.Sprint(trace.args[0][0]); got != fmt.Sprint(wantKeys) {
		t.Errorf("fence check keys %s, want %s (entity order)", got, wantKeys)
	}
	if n := count(t, pool, `SELECT count(*) FROM effects`); n != 0 {
		t.Errorf("%d effects after the stale batch, want 0", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM `+idempotency.DefaultTable); n != 0 {
		t.Errorf("%d idempotency records after the stale batch, want 0", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM choreo_lock_fences`); n != 1 {
		t.Errorf("%d fence rows after the stale batch, want only the newer holder's", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM choreo_lock_fences WHERE entity = $1 AND token = $2`, fresh.Key(), fresh.Token()); n != 1 {
		t.Errorf("the newer holder's fence row changed")
	}

	// The same batch with b's fresh lease, and with the leases collected from the
	// messages (held nil), commits and records every token.
	leases := []*lock.Lease{held[0], fresh, held[2]}
	for i, h := range [][]*lock.Lease{leases, nil} {
		trace.reset()
		if err := tr.run(ctx, batch(leases, i+1), nil, h); err != nil {
			t.Fatalf("fresh batch (held %v): %v", h != nil, err)
		}
		if trace.alone != 0 || trace.fenceInBatches() != 1 {
			t.Errorf("fence checks: %d alone, %d leading a claim; want 0 and 1", trace.alone, trace.fenceInBatches())
		}
		if got := fmt.Sprint(trace.args[0][0]); got != fmt.Sprint([]string{held[0].Key(), fresh.Key(), held[2].Key()}) {
			t.Errorf("fence check keys %s, want entity order", got)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM effects`); n != 6 {
		t.Errorf("%d effects, want 6", n)
	}
	for _, ls := range leases {
		if n := count(t, pool, `SELECT count(*) FROM choreo_lock_fences WHERE entity = $1 AND token = $2`, ls.Key(), ls.Token()); n != 1 {
			t.Errorf("no fence row for %s token %d", ls.Key(), ls.Token())
		}
	}
}

// One record's fence check is the same check (internal/fence.Check) with one lease, leading
// its claim.
func TestOneRecordFenceLeadsClaim(t *testing.T) {
	trace := new(fenceTrace)
	pool := tracedDB(t, trace)
	rdb, ns := testenv.Redis(t)
	ctx := context.Background()
	locker := newLocker(t, rdb, lock.WithNamespace(ns), lock.WithTTL(time.Minute), lock.WithoutWatchdog())
	ls, err := locker.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(ctx)
	h := idempotent(t, IdempotentConfig{DB: pool, Fence: true}, applySeq)
	m := decoded(t, "k", 1)
	m.lease = ls
	trace.reset()
	if err := h(ctx, m); err != nil {
		t.Fatal(err)
	}
	if trace.alone != 0 || trace.fenceInBatches() != 1 {
		t.Errorf("fence checks: %d alone, %d leading a claim; want 0 and 1", trace.alone, trace.fenceInBatches())
	}
	// Three round trips: BEGIN with the fence and the claim, the handler's two statements
	// on their own, and COMMIT (nothing enqueued here) in a batch of its own.
	if len(trace.batches) != 2 || len(trace.batches[0]) != 3 || trace.batches[0][0] != "begin" ||
		len(trace.queries) != 2 || strings.Join(trace.batches[1], ";") != "commit" {
		t.Errorf("round trips: batches %q, queries %q; want [begin, fence, claim] and [commit] around the handler's two", trace.batches, trace.queries)
	}
	if n := count(t, pool, `SELECT count(*) FROM choreo_lock_fences WHERE entity = $1 AND token = $2`, ls.Key(), ls.Token()); n != 1 {
		t.Errorf("no fence row for %s token %d", ls.Key(), ls.Token())
	}

	// Without a fence the claim alone carries the BEGIN.
	plain := idempotent(t, IdempotentConfig{DB: pool}, applySeq)
	trace.reset()
	if err := plain(ctx, decoded(t, "k", 2)); err != nil {
		t.Fatal(err)
	}
	if len(trace.batches) != 2 || len(trace.batches[0]) != 2 || trace.batches[0][0] != "begin" || len(trace.queries) != 2 {
		t.Errorf("round trips without a fence: batches %q, queries %q; want [begin, claim] and [commit] around the handler's two", trace.batches, trace.queries)
	}
}
