package lock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// newLocker returns a Locker in the test's Redis namespace.
func newLocker(t *testing.T, opts lock.Options) (*lock.Locker, *redis.Client) {
	t.Helper()
	client, ns := testenv.Redis(t)
	opts.Namespace = ns + "lock:"
	return lock.New(client, opts), client
}

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
	locker, _ := newLocker(t, lock.Options{
		TTL:     5 * time.Second,
		MaxWait: 2 * time.Minute, // generous: this test is about exclusion, not speed
		Retry:   lock.FullJitter(time.Millisecond, 20*time.Millisecond),
	})
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
	locker, _ := newLocker(t, lock.Options{Retry: lock.NoRetry()})
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
	locker, client := newLocker(t, lock.Options{Retry: lock.NoRetry()})
	ns := locker.Options().Namespace
	ctx := context.Background()
	held, err := locker.Acquire(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)

	if _, err := locker.Acquire(ctx, "e"); !errors.Is(err, lock.ErrNotObtained) || errors.Is(err, lock.ErrLost) {
		t.Fatalf("NoRetry: err = %v, want ErrNotObtained only", err)
	}

	withRetry := lock.New(client, lock.Options{Namespace: ns})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = withRetry.Acquire(cctx, "e")
	if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: err = %v, want ErrNotObtained and context.Canceled", err)
	}

	short := lock.New(client, lock.Options{
		Namespace: ns,
		MaxWait:   30 * time.Millisecond,
		Retry:     lock.FullJitter(time.Millisecond, 5*time.Millisecond),
	})
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
	locker, client := newLocker(t, lock.Options{
		TTL:          100 * time.Millisecond,
		RefreshEvery: -1, // no watchdog: A behaves like a paused process
		Retry:        lock.FullJitter(time.Millisecond, 10*time.Millisecond),
		MaxWait:      time.Minute,
	})
	ctx := waitCtx(t)
	a, err := locker.Acquire(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	// B (a long TTL, so its lock outlives the checks below) waits with
	// retries until A's TTL has passed in Redis.
	lockerB := lock.New(client, lock.Options{
		Namespace: locker.Options().Namespace,
		TTL:       time.Minute,
		Retry:     lock.FullJitter(time.Millisecond, 10*time.Millisecond),
		MaxWait:   time.Minute,
	})
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
	locker, client := newLocker(t, lock.Options{TTL: ttl, Retry: lock.NoRetry()})
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
	locker, client := newLocker(t, lock.Options{
		TTL:          3 * time.Second,
		RefreshEvery: 10 * time.Millisecond,
		Retry:        lock.NoRetry(),
	})
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
	locker, _ := newLocker(t, lock.Options{TTL: 50 * time.Millisecond, RefreshEvery: -1})
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
	locker, client := newLocker(t, lock.Options{})
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
	locker, client := newLocker(t, lock.Options{Retry: lock.NoRetry(), FenceRetention: time.Hour})
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
	locker, client := newLocker(t, lock.Options{Retry: lock.NoRetry()})
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

func TestFullJitter(t *testing.T) {
	tests := []struct {
		base, max time.Duration
		ceilings  []time.Duration
	}{
		{10 * time.Millisecond, 80 * time.Millisecond, []time.Duration{10, 20, 40, 80, 80, 80}},
		{time.Millisecond, time.Millisecond, []time.Duration{1, 1, 1}},
		{5 * time.Millisecond, 12 * time.Millisecond, []time.Duration{5, 10, 12, 12}},
	}
	for _, tt := range tests {
		for range 200 { // many draws: the bounds must hold for every one
			s := lock.FullJitter(tt.base, tt.max)()
			for i, c := range tt.ceilings {
				ceil := c * time.Millisecond
				if d := s.NextBackoff(); d < 1 || d > ceil {
					t.Fatalf("FullJitter(%v, %v) retry %d: %v outside (0, %v]", tt.base, tt.max, i, d, ceil)
				}
			}
		}
	}
	if d := lock.NoRetry()().NextBackoff(); d >= 1 {
		t.Fatalf("NoRetry backoff = %v, want < 1", d)
	}
}

func TestDefaults(t *testing.T) {
	l := lock.New(nil, lock.Options{})
	o := l.Options()
	if o.Namespace != lock.DefaultNamespace || o.TTL != lock.DefaultTTL || o.RefreshEvery != lock.DefaultTTL/3 ||
		o.MaxWait != lock.DefaultTTL || o.FenceRetention != lock.DefaultFenceRetention || o.Retry == nil {
		t.Fatalf("defaults = %+v", o)
	}
	if got := lock.New(nil, lock.Options{TTL: time.Second, RefreshEvery: time.Second}).Options().RefreshEvery; got != 500*time.Millisecond {
		t.Fatalf("RefreshEvery >= TTL/2 lowered to %v, want TTL/2", got)
	}
	if got := l.Key("order-1"); got != "choreo:lock:{order-1}" {
		t.Fatalf("Key = %q", got)
	}
}

// TestTokenOnlyForObtainedLock: the lock and its fencing token are issued
// in one step, so a failed attempt consumes no token, and every obtained
// lease gets exactly counter+1 when the counter is ahead of the clock.
func TestTokenOnlyForObtainedLock(t *testing.T) {
	locker, client := newLocker(t, lock.Options{Retry: lock.NoRetry()})
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
	l := lock.New(rdb, lock.Options{Namespace: ns, Retry: lock.NoRetry()})
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
	l := lock.New(rdb, lock.Options{Namespace: ns, Retry: lock.FullJitter(time.Millisecond, 2*time.Millisecond)})
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
