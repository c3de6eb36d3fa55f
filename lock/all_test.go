package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// hooked returns newLocker's Locker and client with a testenv.ScriptHook installed.
func hooked(t *testing.T, opts ...lock.Option) (*lock.Locker, *redis.Client, *testenv.ScriptHook) {
	t.Helper()
	locker, client := newLocker(t, opts...)
	h := &testenv.ScriptHook{}
	client.AddHook(h)
	return locker, client, h
}

func entitiesOf(leases []*lock.Lease) []string {
	out := make([]string, len(leases))
	for i, ls := range leases {
		out[i] = ls.Entity()
	}
	return out
}

// exists counts the lock keys of entities present in Redis.
func exists(t *testing.T, client *redis.Client, locker *lock.Locker, entities ...string) int64 {
	t.Helper()
	keys := make([]string, len(entities))
	for i, e := range entities {
		keys[i] = locker.Key(e)
	}
	n, err := client.Exists(context.Background(), keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAcquireAll: duplicates and empties are dropped, leases come back
// sorted with their own values and tokens, one round trip obtains them and
// one releases them, and tokens increase per entity across acquisitions.
func TestAcquireAll(t *testing.T) {
	locker, client, hook := hooked(t, lock.WithoutRetry())
	ctx := context.Background()

	for _, in := range [][]string{nil, {}, {"", ""}} {
		leases, err := locker.AcquireAll(ctx, in)
		if leases != nil || err != nil {
			t.Fatalf("AcquireAll(%q) = %v, %v; want nil, nil", in, leases, err)
		}
	}
	if err := lock.ReleaseAll(ctx, nil); err != nil {
		t.Fatalf("ReleaseAll(nil) = %v", err)
	}
	if n := hook.RoundTrips.Load(); n != 0 {
		t.Fatalf("%d EVALSHA round trips for no entity", n)
	}

	last := map[string]int64{}
	for round := range 3 {
		before := hook.RoundTrips.Load()
		leases, err := locker.AcquireAll(ctx, []string{"c", "a", "", "c", "b", "a"})
		if err != nil {
			t.Fatal(err)
		}
		if got := hook.RoundTrips.Load() - before; got != 1 {
			t.Fatalf("AcquireAll took %d EVALSHA round trips, want 1", got)
		}
		if got := fmt.Sprint(entitiesOf(leases)); got != "[a b c]" {
			t.Fatalf("entities = %s, want [a b c]", got)
		}
		values := map[string]bool{}
		for _, ls := range leases {
			if ls.Key() != locker.Key(ls.Entity()) || ls.Err() != nil {
				t.Fatalf("lease %s: key %q, err %v", ls.Entity(), ls.Key(), ls.Err())
			}
			if ls.Token() <= last[ls.Entity()] {
				t.Fatalf("round %d: token of %s = %d, not above %d", round, ls.Entity(), ls.Token(), last[ls.Entity()])
			}
			last[ls.Entity()] = ls.Token()
			v, err := client.Get(ctx, ls.Key()).Result()
			if err != nil || values[v] {
				t.Fatalf("lock value of %s = %q (err %v), want a value of its own", ls.Entity(), v, err)
			}
			values[v] = true
		}
		// Held: a single Acquire of any of them fails.
		if _, err := locker.Acquire(ctx, "b"); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("Acquire(b) during AcquireAll's lease: %v", err)
		}

		before = hook.RoundTrips.Load()
		if err := lock.ReleaseAll(ctx, leases); err != nil {
			t.Fatalf("ReleaseAll = %v", err)
		}
		if got := hook.RoundTrips.Load() - before; got != 1 {
			t.Fatalf("ReleaseAll took %d EVALSHA round trips, want 1", got)
		}
		if n := exists(t, client, locker, "a", "b", "c"); n != 0 {
			t.Fatalf("%d lock keys left after ReleaseAll", n)
		}
		for _, ls := range leases {
			if err := ls.Release(ctx); !errors.Is(ls.Context().Err(), context.Canceled) || err != nil {
				t.Fatalf("released lease %s: ctx err %v, Release again %v", ls.Entity(), ls.Context().Err(), err)
			}
		}
	}

	// A single Acquire continues the same token sequence.
	single, err := locker.Acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer single.Release(ctx)
	if single.Token() <= last["b"] {
		t.Fatalf("Acquire(b) token %d not above AcquireAll's %d", single.Token(), last["b"])
	}
}

// TestAcquireAllIsAllOrNone: while one entity of the set is held, AcquireAll
// fails with ErrNotObtained and leaves none of the others locked; once the
// holder releases, a waiting AcquireAll gets the whole set.
func TestAcquireAllIsAllOrNone(t *testing.T) {
	locker, client, hook := hooked(t, lock.WithoutRetry())
	ns := nsOf(locker)
	ctx := waitCtx(t)
	set := []string{"z", "m", "a"}
	holder, err := locker.Acquire(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}

	if _, err := locker.AcquireAll(ctx, set); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("NoRetry: err = %v, want ErrNotObtained", err)
	} else if !strings.Contains(err.Error(), `"m"`) {
		t.Fatalf("error %q does not name the held entity", err)
	}
	if n := exists(t, client, locker, "a", "z"); n != 0 {
		t.Fatalf("%d of the free entities still locked after a failed AcquireAll", n)
	}

	short := mustNew(t, client, lock.WithNamespace(ns), lock.WithMaxWait(30*time.Millisecond), lock.WithRetryBackoff(time.Millisecond, 5*time.Millisecond))
	if _, err := short.AcquireAll(ctx, set); !errors.Is(err, lock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("max wait: err = %v, want ErrNotObtained (not the caller's deadline)", err)
	}
	if n := exists(t, client, locker, "a", "z"); n != 0 {
		t.Fatalf("%d of the free entities still locked after max wait", n)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := short.AcquireAll(cctx, set); !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: err = %v, want ErrNotObtained and context.Canceled", err)
	}

	// A patient AcquireAll waits; the holder releases once it has seen
	// at least one failed attempt (the attempt and its give-back).
	patient := mustNew(t, client, lock.WithNamespace(ns), lock.WithMaxWait(2*time.Minute), lock.WithRetryBackoff(time.Millisecond, 10*time.Millisecond))
	type result struct {
		leases []*lock.Lease
		err    error
	}
	done := make(chan result, 1)
	start := hook.RoundTrips.Load()
	go func() {
		leases, err := patient.AcquireAll(ctx, set)
		done <- result{leases, err}
	}()
	for hook.RoundTrips.Load()-start < 2 {
		select {
		case r := <-done:
			t.Fatalf("AcquireAll returned %v, %v while m was held", r.leases, r.err)
		case <-ctx.Done():
			t.Fatal("AcquireAll made no attempt")
		case <-time.After(time.Millisecond):
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("AcquireAll did not finish after the holder released")
	}
	if r.err != nil || fmt.Sprint(entitiesOf(r.leases)) != "[a m z]" {
		t.Fatalf("after release: %v, %v", entitiesOf(r.leases), r.err)
	}
	if r.leases[1].Token() <= holder.Token() {
		t.Fatalf("token of m %d not above the previous holder's %d", r.leases[1].Token(), holder.Token())
	}
	if err := lock.ReleaseAll(ctx, r.leases); err != nil {
		t.Fatal(err)
	}
}

// TestAcquireAllOverlappingSets: goroutines acquiring overlapping sets,
// listed in opposite orders, never hold one entity at the same time, and
// all of them finish (no deadlock).
func TestAcquireAllOverlappingSets(t *testing.T) {
	locker, _ := newLocker(t, lock.WithTTL(5*time.Second), lock.WithMaxWait(2*time.Minute), lock.WithRetryBackoff(time.Millisecond, 10*time.Millisecond))
	sets := [][]string{
		{"a", "b", "c", "d"},
		{"e", "d", "c", "b"},
		{"d", "a"},
		{"c", "f", "a"},
	}
	const rounds = 15
	var (
		inside   sync.Map // entity → *atomic.Int64
		overlaps atomic.Int64
		done     atomic.Int64
		wg       sync.WaitGroup
	)
	counter := func(e string) *atomic.Int64 {
		c, _ := inside.LoadOrStore(e, new(atomic.Int64))
		return c.(*atomic.Int64)
	}
	for _, set := range sets {
		wg.Go(func() {
			for range rounds {
				leases, err := locker.AcquireAll(context.Background(), set)
				if err != nil {
					t.Error(err)
					return
				}
				for _, e := range set {
					if counter(e).Add(1) != 1 {
						overlaps.Add(1)
					}
				}
				time.Sleep(time.Millisecond) // widen the window an overlap would need
				for _, e := range set {
					counter(e).Add(-1)
				}
				if err := lock.ReleaseAll(context.Background(), leases); err != nil {
					t.Error(err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping holdings of an entity", overlaps.Load())
	}
	if done.Load() != int64(len(sets)*rounds) {
		t.Fatalf("%d rounds finished, want %d", done.Load(), len(sets)*rounds)
	}
}

// TestReleaseAll: every lock is deleted except one another holder took
// over, which is reported as ErrLost (and only that one); nil leases are
// skipped and a lease released before keeps its own result.
func TestReleaseAll(t *testing.T) {
	locker, client := newLocker(t, lock.WithoutRetry())
	ctx := context.Background()
	leases, err := locker.AcquireAll(ctx, []string{"a", "b", "c", "d"})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Set(ctx, locker.Key("b"), "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := leases[3].Release(ctx); err != nil {
		t.Fatalf("Release(d) = %v", err)
	}
	err = lock.ReleaseAll(ctx, []*lock.Lease{nil, leases[0], leases[1], nil, leases[2], leases[3]})
	if !errors.Is(err, lock.ErrLost) || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("ReleaseAll = %v, want ErrLost for b", err)
	}
	for _, e := range []string{`"a"`, `"c"`, `"d"`} {
		if strings.Contains(err.Error(), e) {
			t.Fatalf("ReleaseAll error %q mentions %s, released cleanly", err, e)
		}
	}
	if n := exists(t, client, locker, "a", "c", "d"); n != 0 {
		t.Fatalf("%d lock keys left after ReleaseAll", n)
	}
	if v := client.Get(ctx, locker.Key("b")).Val(); v != "someone-else" {
		t.Fatalf("other holder's value = %q after ReleaseAll", v)
	}
	if !errors.Is(context.Cause(leases[1].Context()), lock.ErrLost) {
		t.Fatalf("cause of b's context = %v, want ErrLost", context.Cause(leases[1].Context()))
	}
	if err := leases[1].Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Release(b) after ReleaseAll = %v, want the same ErrLost", err)
	}
	if err := leases[0].Release(ctx); err != nil {
		t.Fatalf("Release(a) after ReleaseAll = %v", err)
	}
}

// TestReleaseAllConcurrentWithRelease: a lease released by Release and
// ReleaseAll at once is released once, and both calls see its result.
func TestReleaseAllConcurrentWithRelease(t *testing.T) {
	locker, client := newLocker(t, lock.WithoutRetry())
	ctx := context.Background()
	for range 20 {
		leases, err := locker.AcquireAll(ctx, []string{"a", "b", "c"})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, len(leases)+1)
		for i, ls := range leases {
			wg.Go(func() { errs[i] = ls.Release(ctx) })
		}
		wg.Go(func() { errs[len(leases)] = lock.ReleaseAll(ctx, leases) })
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if n := exists(t, client, locker, "a", "b", "c"); n != 0 {
			t.Fatalf("%d lock keys left", n)
		}
	}
}

// TestAcquireAllAfterScriptFlush: on a server whose script cache was
// flushed, the pipelined EVALSHAs are answered NOSCRIPT and AcquireAll and
// ReleaseAll resend them as EVAL. SCRIPT FLUSH is server-wide; it is safe
// next to other tests because every script caller in this module (Script.Run
// here and in redislock, and the pipelines of this package) falls back to
// EVAL on NOSCRIPT. Another client may load the script again between our
// flush and our pipeline, so the flush is repeated until a resend was seen.
func TestAcquireAllAfterScriptFlush(t *testing.T) {
	locker, client, hook := hooked(t, lock.WithoutRetry())
	ctx := context.Background()
	for try := 0; try < 20 && hook.Evals.Load() == 0; try++ {
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		leases, err := locker.AcquireAll(ctx, []string{"a", "b", "c"})
		if err != nil || len(leases) != 3 {
			t.Fatalf("AcquireAll after SCRIPT FLUSH = %v, %v", leases, err)
		}
		for _, ls := range leases {
			if ls.Token() <= 0 || exists(t, client, locker, ls.Entity()) != 1 {
				t.Fatalf("lease %s after SCRIPT FLUSH: token %d, key missing?", ls.Entity(), ls.Token())
			}
		}
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := lock.ReleaseAll(ctx, leases); err != nil {
			t.Fatalf("ReleaseAll after SCRIPT FLUSH = %v", err)
		}
		if n := exists(t, client, locker, "a", "b", "c"); n != 0 {
			t.Fatalf("%d lock keys left after ReleaseAll", n)
		}
	}
	if hook.Evals.Load() == 0 {
		t.Fatal("no EVAL resend seen in 20 flushes: the NOSCRIPT path was not exercised")
	}
}

// TestAcquireAllRedisError: a Redis failure is returned wrapped, not as
// ErrNotObtained.
func TestAcquireAllRedisError(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	client.Close()
	locker := mustNew(t, client, lock.WithNamespace(testenv.Name(t, "choreo_t")+":lock:"))
	_, err := locker.AcquireAll(context.Background(), []string{"a", "b"})
	if err == nil || errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("AcquireAll on a closed client = %v, want a wrapped redis.ErrClosed", err)
	}
}
