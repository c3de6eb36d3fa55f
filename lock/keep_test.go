package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// kept returns a Locker that keeps locks for keep, whose round trips are counted, with
// its script cache warmed.
func kept(t *testing.T, keep time.Duration, opts ...lock.Option) (*lock.Locker, *redis.Client, *testenv.ScriptHook) {
	t.Helper()
	l, rdb, h := hooked(t, append([]lock.Option{lock.WithoutRetry(), lock.WithKeep(keep)}, opts...)...)
	warmScripts(t, l)
	return l, rdb, h
}

// longKeep keeps a lock for longer than a test needs (below the default TTL).
const longKeep = 9 * time.Second

type ctxKey struct{}

// A lease kept by ReleaseInBackground is handed to the next Acquire of the entity without
// a round trip: the lock stays held in Redis, with the same token, and the new lease's
// Context carries the new Acquire's values while the old one's is cancelled. The old
// lease's Release then has no effect; the new one's releases the lock for real.
func TestKeptLeaseReused(t *testing.T) {
	l, rdb, hook := kept(t, longKeep)
	ctx := context.Background()
	first, err := l.Acquire(context.WithValue(ctx, ctxKey{}, 1), "a")
	if err != nil {
		t.Fatal(err)
	}
	first.ReleaseInBackground()
	if !held(t, rdb, first.Key()) {
		t.Fatal("a kept lock is not held in Redis")
	}
	if !errors.Is(context.Cause(first.Context()), context.Canceled) {
		t.Errorf("a kept lease's context: cause %v, want context.Canceled", context.Cause(first.Context()))
	}
	before := hook.RoundTrips.Load()
	for i := 2; i < 5; i++ {
		next, err := l.Acquire(context.WithValue(ctx, ctxKey{}, i), "a")
		if err != nil {
			t.Fatal(err)
		}
		if got := hook.RoundTrips.Load() - before; got != 0 {
			t.Errorf("reuse %d: %d round trips, want 0", i, got)
		}
		if next.Token() != first.Token() {
			t.Errorf("reuse %d: token %d, want the kept lock's %d", i, next.Token(), first.Token())
		}
		if v := next.Context().Value(ctxKey{}); v != i {
			t.Errorf("reuse %d: context value %v, want this Acquire's %d", i, v, i)
		}
		if err := next.Err(); err != nil {
			t.Errorf("reuse %d: %v", i, err)
		}
		next.ReleaseInBackground()
	}
	if err := first.Release(ctx); err != nil || !held(t, rdb, first.Key()) {
		t.Errorf("a kept lease's late Release: %v, held %v; want nil, still held", err, held(t, rdb, first.Key()))
	}
	last, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := last.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if held(t, rdb, last.Key()) {
		t.Error("Release kept the lock")
	}
	again, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if again.Token() <= first.Token() {
		t.Errorf("token after a release %d, want above %d", again.Token(), first.Token())
	}
	again.ReleaseInBackground()
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// A reused lease's Context is cancelled with ErrLost when the lock is lost, and a lost
// lock is not kept: the next Acquire obtains a new lock with a new token.
func TestReusedLeaseLost(t *testing.T) {
	l, rdb, _ := kept(t, longKeep)
	ctx := context.Background()
	first, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	first.ReleaseInBackground()
	reused, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, reused.Key(), "someone-else", 0).Err(); err != nil {
		t.Fatal(err)
	}
	lock.Refresh(reused)
	<-reused.Context().Done()
	if !errors.Is(context.Cause(reused.Context()), lock.ErrLost) {
		t.Fatalf("cause %v, want ErrLost", context.Cause(reused.Context()))
	}
	reused.ReleaseInBackground()
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := rdb.Get(ctx, reused.Key()).Result(); v != "someone-else" {
		t.Fatalf("the other holder's lock: %q", v)
	}
	if _, err := l.Acquire(ctx, "a"); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Acquire of a lock held elsewhere: %v, want ErrNotObtained (a lost lock reused?)", err)
	}
	if err := rdb.Del(ctx, reused.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	next, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= reused.Token() {
		t.Errorf("token %d after a lost lock's %d", next.Token(), reused.Token())
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A kept lock that its watchdog found lost while idle is never handed out: the next
// Acquire releases it (compare-and-delete: nothing of the new holder's) in the pipeline of
// its own obtain, one round trip, and gets a new lock.
func TestLostKeptLockNotReused(t *testing.T) {
	l, rdb, hook := kept(t, longKeep)
	lock.SetRefreshBatchDelay(l, time.Hour) // sent by FlushRefreshes only
	ctx := context.Background()
	old, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	old.ReleaseInBackground()
	if err := rdb.Del(ctx, old.Key()).Err(); err != nil { // expired, say
		t.Fatal(err)
	}
	lock.Refresh(old) // the watchdog's refresh, queued with the other kept locks'
	lock.FlushRefreshes(l)
	before := hook.RoundTrips.Load()
	next, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got := hook.RoundTrips.Load() - before; got != 1 {
		t.Errorf("%d round trips, want 1 (the lost lock's release carried with the obtain)", got)
	}
	if next.Token() <= old.Token() {
		t.Errorf("token %d, want a new lock's, above %d", next.Token(), old.Token())
	}
	if !held(t, rdb, next.Key()) {
		t.Error("the new lock is not held")
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lock kept idle for the keep duration is released (without Wait or another Acquire),
// and a lock whose lease's context has ended is released rather than kept.
func TestKeptLockReleasedWhenIdle(t *testing.T) {
	l, rdb, _ := kept(t, 20*time.Millisecond)
	ctx := waitCtx(t)
	ls, err := l.Acquire(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	ls.ReleaseInBackground()
	awaitReleased(ctx, t, rdb, ls.Key(), "the kept lock was never released")
	next, err := l.Acquire(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= ls.Token() {
		t.Errorf("token %d after an idle release of %d", next.Token(), ls.Token())
	}

	stopped, stop := context.WithCancel(ctx)
	worker, err := l.Acquire(stopped, "stopping")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	worker.ReleaseInBackground()
	if err := l.Wait(ctx); err != nil { // sends the queued release: not a kept one
		t.Fatal(err)
	}
	if held(t, rdb, worker.Key()) {
		t.Error("a lease whose context ended was kept")
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Wait releases every kept lock at once.
func TestWaitReleasesKeptLocks(t *testing.T) {
	l, rdb, _ := kept(t, longKeep)
	ctx := waitCtx(t)
	entities := []string{"x", "y", "z"}
	for _, e := range entities {
		ls, err := l.Acquire(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		ls.ReleaseInBackground()
	}
	if n := exists(t, rdb, l, entities...); n != 3 {
		t.Fatalf("%d of 3 kept locks held", n)
	}
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if n := exists(t, rdb, l, entities...); n != 0 {
		t.Errorf("%d kept locks still held after Wait", n)
	}
}

// AcquireAll does not reuse kept locks: it releases those of its entities in the pipeline
// of its obtains (one round trip) and obtains all of them anew, all or none.
func TestAcquireAllReleasesKeptLocks(t *testing.T) {
	l, _, hook := kept(t, longKeep)
	ctx := context.Background()
	tokens := map[string]int64{}
	for _, e := range []string{"a", "b"} {
		ls, err := l.Acquire(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		tokens[e] = ls.Token()
		ls.ReleaseInBackground()
	}
	before := hook.RoundTrips.Load()
	all, err := l.AcquireAll(ctx, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if got := hook.RoundTrips.Load() - before; got != 1 {
		t.Errorf("%d round trips, want 1", got)
	}
	for _, ls := range all {
		if ls.Token() <= tokens[ls.Entity()] {
			t.Errorf("%s: token %d, want a new lock's, above %d", ls.Entity(), ls.Token(), tokens[ls.Entity()])
		}
	}
	if err := lock.ReleaseAll(ctx, all); err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// Many goroutines on two Lockers (two instances) contend for a few entities with kept
// locks: no two holders of an entity ever overlap, tokens never go back, and kept locks
// are reused.
func TestKeptLocksMutualExclusion(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	opts := []lock.Option{lock.WithNamespace(ns), lock.WithKeep(50 * time.Millisecond),
		lock.WithRetryBackoff(time.Millisecond, 5*time.Millisecond), lock.WithMaxWait(2 * time.Minute)}
	lockers := []*lock.Locker{mustNew(t, rdb, opts...), mustNew(t, rdb, opts...)}
	const (
		entities = 3
		workers  = 8 // per Locker
		rounds   = 30
	)
	var (
		inside                      [entities]atomic.Int32
		last                        [entities]atomic.Int64
		mu                          [entities]sync.Mutex
		overlaps, backwards, reuses atomic.Int64
		wg                          sync.WaitGroup
	)
	ctx := waitCtx(t)
	for w := range 2 * workers {
		l := lockers[w%2]
		wg.Go(func() {
			for r := range rounds {
				e := (w + r) % entities
				ls, err := l.Acquire(ctx, fmt.Sprint("e", e))
				if err != nil {
					t.Error(err)
					return
				}
				if inside[e].Add(1) > 1 {
					overlaps.Add(1)
				}
				mu[e].Lock()
				switch prev := last[e].Load(); {
				case ls.Token() < prev:
					backwards.Add(1)
				case ls.Token() == prev:
					reuses.Add(1)
				}
				last[e].Store(ls.Token())
				mu[e].Unlock()
				inside[e].Add(-1)
				ls.ReleaseInBackground()
			}
		})
	}
	wg.Wait()
	for _, l := range lockers {
		if err := l.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if overlaps.Load() != 0 || backwards.Load() != 0 {
		t.Errorf("%d overlapping holders, %d tokens going back", overlaps.Load(), backwards.Load())
	}
	if reuses.Load() == 0 {
		t.Error("no kept lock was reused")
	}
	for e := range entities {
		if exists(t, rdb, lockers[0], fmt.Sprint("e", e)) != 0 {
			t.Errorf("e%d still locked after Wait", e)
		}
	}
}

// The watchdog refreshes of kept locks go out together, in one round trip, and extend
// every lock's validity.
func TestKeptLocksRefreshedTogether(t *testing.T) {
	l, _, hook := kept(t, longKeep)
	lock.SetRefreshBatchDelay(l, time.Hour) // sent by FlushRefreshes only
	ctx := context.Background()
	var leases []*lock.Lease
	for _, e := range []string{"x", "y", "z"} {
		ls, err := l.Acquire(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		ls.ReleaseInBackground()
		leases = append(leases, ls)
	}
	before, batches := hook.RoundTrips.Load(), hook.MultiScript.Load()
	valid := leases[2].ValidUntil()
	for _, ls := range leases {
		lock.Refresh(ls)
	}
	if got := hook.RoundTrips.Load() - before; got != 0 {
		t.Errorf("%d round trips before the batch went out", got)
	}
	lock.FlushRefreshes(l)
	if got := hook.RoundTrips.Load() - before; got != 1 || hook.MultiScript.Load() != batches+1 {
		t.Errorf("%d round trips, %d with several scripts; want the 3 refreshes in 1", got, hook.MultiScript.Load()-batches)
	}
	for _, ls := range leases {
		if !ls.ValidUntil().After(valid) {
			t.Errorf("%s: validity not extended", ls.Entity())
		}
	}
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// WithKeep must be below the TTL, not negative, and needs the watchdog.
func TestKeepOptionChecked(t *testing.T) {
	rdb, _ := testenv.Redis(t)
	for _, opts := range [][]lock.Option{
		{lock.WithKeep(-time.Second)},
		{lock.WithTTL(time.Second), lock.WithKeep(time.Second)},
		{lock.WithKeep(time.Second), lock.WithoutWatchdog()},
	} {
		if _, err := lock.New(rdb, opts...); !errors.Is(err, lock.ErrInvalidOption) {
			t.Errorf("New: %v, want ErrInvalidOption", err)
		}
	}
	if _, err := lock.New(rdb, lock.WithKeep(time.Second)); err != nil {
		t.Error(err)
	}
}
