package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// newLocker returns a Locker in the test's Redis namespace.
func newLocker(t *testing.T, opts ...lock.Option) (*lock.Locker, *redis.Client) {
	t.Helper()
	client, ns := testenv.Redis(t)
	return mustNew(t, client, append([]lock.Option{lock.WithNamespace(ns + "lock:")}, opts...)...), client
}

// mustNew is lock.New that fails the test on an error.
func mustNew(t testing.TB, client redis.UniversalClient, opts ...lock.Option) *lock.Locker {
	t.Helper()
	l, err := lock.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// nsOf returns the namespace of l's keys.
func nsOf(l *lock.Locker) string { return strings.TrimSuffix(l.Key(""), "{}") }

// waitCtx bounds a wait that must happen; it is a deadlock guard, not a
// performance threshold.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestMutualExclusion: 20 goroutines contend on one entity; no two critical
// sections overlap, every acquisition succeeds eventually, and fencing
// tokens increase in the order the lock was held.
func TestMutualExclusion(t *testing.T) {
	locker, _ := newLocker(t, lock.WithTTL(5*time.Second), lock.WithMaxWait(2*time.Minute), lock.WithRetryBackoff(time.Millisecond, 20*time.Millisecond))
	const (
		workers = 20
		rounds  = 5
	)
	var (
		inside, overlaps, entered atomic.Int64
		mu                        sync.Mutex
		tokens                    []int64
		wg                        sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for range rounds {
				lease, err := locker.Acquire(context.Background(), "order-1")
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				entered.Add(1)
				mu.Lock()
				tokens = append(tokens, lease.Token())
				mu.Unlock()
				time.Sleep(time.Millisecond) // widen the window an overlap would need
				inside.Add(-1)
				if err := lease.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping critical sections", overlaps.Load())
	}
	if entered.Load() != workers*rounds {
		t.Fatalf("%d critical sections, want %d", entered.Load(), workers*rounds)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d = %d after %d: not increasing in holding order", i, tokens[i], tokens[i-1])
		}
	}
}

// TestIndependentEntitiesInParallel: holders of different entities hold
// their locks at the same time (each waits until all hold theirs).
func TestIndependentEntitiesInParallel(t *testing.T) {
	locker, _ := newLocker(t, lock.WithoutRetry())
	const n = 8
	ctx := waitCtx(t)
	var (
		holding sync.WaitGroup
		wg      sync.WaitGroup
	)
	holding.Add(n)
	allHeld := make(chan struct{})
	go func() { holding.Wait(); close(allHeld) }()
	for i := range n {
		wg.Go(func() {
			entity := string(rune('a' + i))
			lease, err := locker.Acquire(ctx, entity) // NoRetry: must succeed at once
			if err != nil {
				t.Errorf("Acquire(%s) while other entities are held: %v", entity, err)
				holding.Done()
				return
			}
			defer lease.Release(context.Background())
			holding.Done()
			select {
			case <-allHeld:
			case <-ctx.Done():
				t.Errorf("entity %s: the other entities never held their locks at the same time", entity)
			}
		})
	}
	wg.Wait()
}

func TestNotObtained(t *testing.T) {
	locker, client := newLocker(t, lock.WithoutRetry())
	ns := nsOf(locker)
	ctx := context.Background()
	held, err := locker.Acquire(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)

	if _, err := locker.Acquire(ctx, "e"); !errors.Is(err, lock.ErrNotObtained) || errors.Is(err, lock.ErrLost) {
		t.Fatalf("NoRetry: err = %v, want ErrNotObtained only", err)
	}

	withRetry := mustNew(t, client, lock.WithNamespace(ns))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = withRetry.Acquire(cctx, "e")
	if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: err = %v, want ErrNotObtained and context.Canceled", err)
	}

	short := mustNew(t, client, lock.WithNamespace(ns), lock.WithMaxWait(30*time.Millisecond), lock.WithRetryBackoff(time.Millisecond, 5*time.Millisecond))
	if _, err := short.Acquire(ctx, "e"); !errors.Is(err, lock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("max wait: err = %v, want ErrNotObtained (not the caller's deadline)", err)
	}

	if _, err := locker.Acquire(ctx, ""); !errors.Is(err, lock.ErrInvalidEntity) {
		t.Fatalf("empty entity: err = %v", err)
	}
}

// TestReleaseOfExpiredLeaseKeepsNextHolder: A's lock expires, B takes it;
// A's Release reports ErrLost and leaves B's lock in place.
func TestReleaseOfExpiredLeaseKeepsNextHolder(t *testing.T) {
	locker, client := newLocker(t, lock.WithTTL(100*time.Millisecond), lock.WithoutWatchdog(), lock.WithRetryBackoff(time.Millisecond, 10*time.Millisecond), lock.WithMaxWait(time.Minute))
	ctx := waitCtx(t)
	a, err := locker.Acquire(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	// B (a long TTL, so its lock outlives the checks below) waits with
	// retries until A's TTL has passed in Redis.
	lockerB := mustNew(t, client, lock.WithNamespace(nsOf(locker)), lock.WithTTL(time.Minute), lock.WithRetryBackoff(time.Millisecond, 10*time.Millisecond), lock.WithMaxWait(time.Minute))
	b, err := lockerB.Acquire(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("B's token %d is not above A's %d", b.Token(), a.Token())
	}
	if err := a.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("A.Release = %v, want ErrLost", err)
	}
	if err := a.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("second A.Release = %v, want the same ErrLost", err)
	}
	if n, err := client.Exists(ctx, locker.Key("e")).Result(); err != nil || n != 1 {
		t.Fatalf("B's lock gone after A's release: exists=%d err=%v", n, err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("B.Release = %v", err)
	}
	if cause := context.Cause(a.Context()); !errors.Is(cause, lock.ErrLost) {
		t.Fatalf("A's context cause = %v, want ErrLost", cause)
	}
}

// TestWatchdogKeepsLongHolderAlive: a holder that runs for several TTLs
// keeps its lock through refreshes.
func TestWatchdogKeepsLongHolderAlive(t *testing.T) {
	// Short enough to keep the test quick, long enough that a refresh delayed by a
	// loaded machine still lands within the TTL.
	const ttl = 500 * time.Millisecond
	locker, client := newLocker(t, lock.WithTTL(ttl), lock.WithoutRetry())
	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	first := lease.ValidUntil()
	time.Sleep(2*ttl + ttl/2)
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost while its holder was alive: %v", err)
	}
	if !lease.ValidUntil().After(first.Add(ttl)) {
		t.Fatalf("ValidUntil %v not extended beyond %v", lease.ValidUntil(), first.Add(ttl))
	}
	if _, err := locker.Acquire(ctx, "e"); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("second Acquire during a refreshed lease: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := client.Exists(ctx, locker.Key("e")).Val(); n != 0 {
		t.Fatal("lock key left after Release")
	}
	if !errors.Is(lease.Context().Err(), context.Canceled) || errors.Is(context.Cause(lease.Context()), lock.ErrLost) {
		t.Fatalf("released lease context: err=%v cause=%v", lease.Context().Err(), context.Cause(lease.Context()))
	}
}

// TestWatchdogCancelsContextWhenLockIsTaken: when a refresh finds another
// value under the key, the lease context is cancelled with ErrLost, and
// Release does not delete the other value.
func TestWatchdogCancelsContextWhenLockIsTaken(t *testing.T) {
	locker, client := newLocker(t, lock.WithTTL(3*time.Second), lock.WithRefreshEvery(10*time.Millisecond), lock.WithoutRetry())
	ctx := waitCtx(t)
	lease, err := locker.Acquire(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	// Another process takes over the key (as if our lock had expired).
	if err := client.Set(ctx, locker.Key("e"), "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Context().Done():
	case <-ctx.Done():
		t.Fatal("lease context not cancelled after the lock was taken")
	}
	if !errors.Is(context.Cause(lease.Context()), lock.ErrLost) || !errors.Is(lease.Err(), lock.ErrLost) {
		t.Fatalf("cause = %v, Err = %v; want ErrLost", context.Cause(lease.Context()), lease.Err())
	}
	if err := lease.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Release = %v, want ErrLost", err)
	}
	if v := client.Get(ctx, locker.Key("e")).Val(); v != "someone-else" {
		t.Fatalf("other holder's value = %q after our Release", v)
	}
}

// TestLeaseWithoutWatchdogExpires: with the watchdog disabled the lease
// context ends after TTL, with ErrLost.
func TestLeaseWithoutWatchdogExpires(t *testing.T) {
	locker, _ := newLocker(t, lock.WithTTL(50*time.Millisecond), lock.WithoutWatchdog())
	ctx := waitCtx(t)
	lease, err := locker.Acquire(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Context().Done():
	case <-ctx.Done():
		t.Fatal("lease context never ended")
	}
	if !errors.Is(lease.Err(), lock.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", lease.Err())
	}
}

// TestParentCancelEndsLease: cancelling the Acquire context cancels the
// lease context with that cause (not ErrLost); Release still works.
func TestParentCancelEndsLease(t *testing.T) {
	locker, client := newLocker(t)
	parent, cancel := context.WithCancel(context.Background())
	lease, err := locker.Acquire(parent, "e")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-lease.Context().Done()
	if errors.Is(lease.Err(), lock.ErrLost) || !errors.Is(lease.Err(), context.Canceled) {
		t.Fatalf("Err = %v, want context.Canceled", lease.Err())
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if client.Exists(context.Background(), locker.Key("e")).Val() != 0 {
		t.Fatal("lock key left after Release")
	}
}

// TestTokensStayMonotonicWhenCounterIsLost: deleting the fencing counter
// (expiry, failover) never makes tokens go back.
func TestTokensStayMonotonicWhenCounterIsLost(t *testing.T) {
	locker, client := newLocker(t, lock.WithoutRetry(), lock.WithFenceRetention(time.Hour))
	ctx := context.Background()
	var last int64
	for i := range 6 {
		if i%2 == 1 {
			if err := client.Del(ctx, locker.Key("e")+":fence").Err(); err != nil {
				t.Fatal(err)
			}
		}
		lease, err := locker.Acquire(ctx, "e")
		if err != nil {
			t.Fatal(err)
		}
		if lease.Token() <= last {
			t.Fatalf("acquisition %d: token %d not above %d", i, lease.Token(), last)
		}
		last = lease.Token()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ttl := client.PTTL(ctx, locker.Key("e")+":fence").Val()
	if ttl <= 0 || ttl > time.Hour {
		t.Fatalf("fence counter TTL = %v, want (0, 1h]", ttl)
	}
}

func TestDo(t *testing.T) {
	locker, client := newLocker(t, lock.WithoutRetry())
	ctx := context.Background()
	boom := errors.New("boom")
	var token int64
	err := locker.Do(ctx, "e", func(ctx context.Context, lease *lock.Lease) error {
		token = lease.Token()
		if ctx != lease.Context() {
			t.Error("fn did not get the lease context")
		}
		if client.Exists(ctx, locker.Key("e")).Val() != 1 {
			t.Error("lock not held inside Do")
		}
		return boom
	})
	if err != boom || token <= 0 {
		t.Fatalf("Do = %v (token %d), want fn's error", err, token)
	}
	if client.Exists(ctx, locker.Key("e")).Val() != 0 {
		t.Fatal("lock held after Do")
	}
}

func TestDefaults(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer client.Close()
	l := mustNew(t, client)
	if got := l.Key("order-1"); got != "choreo:lock:{order-1}" {
		t.Fatalf("Key = %q", got)
	}
	if _, err := lock.New(nil); !errors.Is(err, lock.ErrInvalidConfig) {
		t.Fatalf("nil client: %v", err)
	}
	for name, opt := range map[string]lock.Option{
		"refresh >= TTL/2": lock.WithRefreshEvery(lock.DefaultTTL / 2),
		"empty namespace":  lock.WithNamespace(""),
		"TTL 0":            lock.WithTTL(0),
		"refresh 0":        lock.WithRefreshEvery(0),
		"backoff max<base": lock.WithRetryBackoff(time.Second, time.Millisecond),
		"backoff base 0":   lock.WithRetryBackoff(0, time.Second),
		"max wait 0":       lock.WithMaxWait(0),
		"retention 0":      lock.WithFenceRetention(-time.Hour),
	} {
		if _, err := lock.New(client, opt); !errors.Is(err, lock.ErrInvalidConfig) {
			t.Errorf("%s: err %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestTokenOnlyForObtainedLock: the lock and its fencing token are issued
// in one step, so a failed attempt consumes no token, and every obtained
// lease gets exactly counter+1 when the counter is ahead of the clock.
func TestTokenOnlyForObtainedLock(t *testing.T) {
	locker, client := newLocker(t, lock.WithoutRetry())
	ctx := context.Background()
	const base = int64(8e15) // far above the Redis clock in µs (~1.8e15 in 2026)
	if err := client.Set(ctx, locker.Key("e")+":fence", base, 0).Err(); err != nil {
		t.Fatal(err)
	}
	held, err := locker.Acquire(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	if held.Token() != base+1 {
		t.Fatalf("first token = %d, want %d", held.Token(), base+1)
	}
	for range 3 {
		if _, err := locker.Acquire(ctx, "e"); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("contended acquire: err = %v, want ErrNotObtained", err)
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := locker.Acquire(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() != base+2 {
		t.Fatalf("token after 3 failed attempts = %d, want %d", next.Token(), base+2)
	}
	if n := client.Exists(ctx, locker.Key("e")).Val(); n != 1 {
		t.Fatalf("lock key exists = %d, want 1", n)
	}
}

// A lease released in the background does not block its own Locker's next Acquire of the
// entity, even with no retries: Acquire waits for the release instead of finding the lock
// still held. Wait returns once every background release has ended, and the lock is gone.
func TestReleaseInBackground(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	l := mustNew(t, rdb, lock.WithNamespace(ns), lock.WithoutRetry())
	ctx := context.Background()
	for i := range 100 {
		ls, err := l.Acquire(ctx, "o-1")
		if err != nil {
			t.Fatalf("acquisition %d: %v", i, err)
		}
		ls.ReleaseInBackground()
	}
	ls, err := l.AcquireAll(ctx, []string{"o-1", "o-2"})
	if err != nil {
		t.Fatalf("AcquireAll after a background release: %v", err)
	}
	for _, x := range ls {
		x.ReleaseInBackground()
	}
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{"o-1", "o-2"} {
		if n, err := rdb.Exists(ctx, l.Key(e)).Result(); err != nil || n != 0 {
			t.Errorf("%s: lock key still exists after Wait (%d, %v)", e, n, err)
		}
	}
	if err := ls[0].Err(); err == nil {
		t.Error("a released lease's context is still live")
	}
}

// Background releases and acquisitions racing on one entity never let two holders in.
func TestReleaseInBackgroundSerialises(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	l := mustNew(t, rdb, lock.WithNamespace(ns), lock.WithRetryBackoff(time.Millisecond, 2*time.Millisecond))
	ctx := context.Background()
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				ls, err := l.Acquire(ctx, "o-1")
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				inside.Add(-1)
				ls.ReleaseInBackground()
			}
		})
	}
	wg.Wait()
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if overlaps.Load() != 0 {
		t.Errorf("%d overlapping holders", overlaps.Load())
	}
}
