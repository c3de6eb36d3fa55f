package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// counted returns a Locker whose round trips are counted, with background releases that
// wait delay for an acquisition to carry them, and warms the script cache (so that no
// NOSCRIPT retry adds a round trip).
func counted(t *testing.T, delay time.Duration) (*lock.Locker, *redis.Client, *testenv.ScriptHook) {
	t.Helper()
	rdb, ns := testenv.Redis(t)
	h := new(testenv.ScriptHook)
	rdb.AddHook(h)
	l := mustNew(t, rdb, lock.WithNamespace(ns+"lock:"), lock.WithoutRetry())
	lock.SetReleaseDelay(l, delay)
	warmScripts(t, l)
	return l, rdb, h
}

// warmScripts acquires and releases one lock on l, so that Redis has its scripts cached
// before a test counts round trips.
func warmScripts(t *testing.T, l *lock.Locker) {
	t.Helper()
	ctx := context.Background()
	ls, err := l.Acquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// awaitReleased polls until key is no longer held, failing with why if ctx ends first.
func awaitReleased(ctx context.Context, t *testing.T, rdb *redis.Client, key, why string) {
	t.Helper()
	for held(t, rdb, key) {
		select {
		case <-ctx.Done():
			t.Fatal(why)
		case <-time.After(time.Millisecond):
		}
	}
}

func held(t *testing.T, rdb *redis.Client, key string) bool {
	t.Helper()
	n, err := rdb.Exists(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// A background release goes out with the next Acquire, in its pipeline: one round trip for
// both, and the released lock is gone when Acquire returns. For the same entity, the
// release goes first, so the next lease of the entity is obtained at once, with a higher
// token. AcquireAll carries queued releases the same way.
func TestReleaseCarriedByNextAcquire(t *testing.T) {
	l, rdb, h := counted(t, time.Hour) // never sent on its own here
	ctx := context.Background()
	prev, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range []string{"b", "b", "b", "a", "a", "c"} {
		prev.ReleaseInBackground()
		if !held(t, rdb, prev.Key()) {
			t.Fatalf("%d: the release went out before the next acquisition", i)
		}
		before := h.RoundTrips.Load()
		next, err := l.Acquire(ctx, e)
		if err != nil {
			t.Fatalf("%d: acquire %s after a background release of %s: %v", i, e, prev.Entity(), err)
		}
		if got := h.RoundTrips.Load() - before; got != 1 {
			t.Errorf("%d: %d round trips for a release and an acquisition, want 1", i, got)
		}
		if e != prev.Entity() && held(t, rdb, prev.Key()) {
			t.Errorf("%d: %s's lock still held after the acquisition that carried its release", i, prev.Entity())
		}
		if e == prev.Entity() && next.Token() <= prev.Token() {
			t.Errorf("%d: token %d after %d", i, next.Token(), prev.Token())
		}
		if prev.Err() == nil {
			t.Errorf("%d: a released lease's context is still live", i)
		}
		prev = next
	}
	prev.ReleaseInBackground()
	before := h.RoundTrips.Load()
	all, err := l.AcquireAll(ctx, []string{"c", "d"})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.RoundTrips.Load() - before; got != 1 {
		t.Errorf("AcquireAll: %d round trips, want 1", got)
	}
	if err := lock.ReleaseAll(ctx, all); err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// With no acquisition to carry it, a background release is sent on its own (after the
// short delay), without Wait.
func TestIdleReleaseSentAlone(t *testing.T) {
	l, rdb, _ := counted(t, time.Millisecond)
	ctx := waitCtx(t)
	ls, err := l.Acquire(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	ls.ReleaseInBackground()
	awaitReleased(ctx, t, rdb, ls.Key(), "the idle Locker's background release never reached Redis")
	<-ls.Context().Done()
	if !errors.Is(context.Cause(ls.Context()), context.Canceled) {
		t.Errorf("released lease's cause %v", context.Cause(ls.Context()))
	}
}

// Wait sends the queued releases at once (shutdown): no lock key is left behind.
func TestWaitSendsQueuedReleases(t *testing.T) {
	l, rdb, _ := counted(t, time.Hour)
	ctx := waitCtx(t)
	var keys []string
	for _, e := range []string{"x", "y", "z"} {
		ls, err := l.Acquire(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		ls.ReleaseInBackground()
		keys = append(keys, ls.Key())
	}
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if held(t, rdb, k) {
			t.Errorf("%s still held after Wait", k)
		}
	}
}

// Another holder waiting for the entity (another Locker, as another instance) gets it
// without the first Locker acquiring anything more or waiting: the queued release is sent
// on its own.
func TestContendedEntityHandedOver(t *testing.T) {
	l, rdb, _ := counted(t, time.Millisecond)
	other := mustNew(t, rdb, lock.WithNamespace(nsOf(l)), lock.WithRetryBackoff(time.Millisecond, 5*time.Millisecond), lock.WithMaxWait(time.Minute))
	ctx := waitCtx(t)
	ls, err := l.Acquire(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		o, err := other.Acquire(ctx, "hot")
		if err == nil {
			err = o.Release(ctx)
		}
		got <- err
	}()
	ls.ReleaseInBackground()
	if err := <-got; err != nil {
		t.Fatalf("the waiting holder: %v", err)
	}
}

// A carried release is still compare-and-delete: when the lock was taken over meanwhile
// (an expired lease), it leaves the new holder's lock alone and the lease reports ErrLost.
func TestCarriedReleaseOfLostLease(t *testing.T) {
	l, rdb, _ := counted(t, time.Hour)
	ctx := waitCtx(t)
	ls, err := l.Acquire(ctx, "taken")
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, ls.Key(), "someone-else", 0).Err(); err != nil {
		t.Fatal(err)
	}
	ls.ReleaseInBackground()
	next, err := l.Acquire(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, ls.Key()).Result(); err != nil || v != "someone-else" {
		t.Errorf("the new holder's lock: %q, %v", v, err)
	}
	if err := ls.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("release result %v, want ErrLost", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}
