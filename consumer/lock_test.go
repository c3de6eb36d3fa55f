package consumer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// Handlers of one entity never overlap, even from concurrent workers.
func TestLockSerialisesAnEntity(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	locker := lock.New(rdb, lock.Options{Namespace: ns, Retry: lock.FullJitter(time.Millisecond, 5*time.Millisecond)})
	var inside, maxInside atomic.Int32
	h := Lock(locker)(func(ctx context.Context, m *Message) error {
		if m.Lease == nil || m.Lease.Entity() != "o-1" {
			t.Errorf("lease %+v inside the handler", m.Lease)
		}
		n := inside.Add(1)
		for {
			old := maxInside.Load()
			if n <= old || maxInside.CompareAndSwap(old, n) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		inside.Add(-1)
		return nil
	})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			m := &Message{Record: &kgo.Record{Key: []byte("o-1")}}
			if err := h(context.Background(), m); err != nil {
				t.Error(err)
			}
			if m.Lease != nil {
				t.Error("lease left on the message after release")
			}
		})
	}
	wg.Wait()
	if maxInside.Load() != 1 {
		t.Errorf("%d handlers of one entity ran at once", maxInside.Load())
	}
}

func TestLockNotObtainedIsRetryable(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	locker := lock.New(rdb, lock.Options{Namespace: ns, MaxWait: 20 * time.Millisecond})
	held, err := locker.Acquire(context.Background(), "o-1")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	called := false
	err = Lock(locker)(func(context.Context, *Message) error { called = true; return nil })(
		context.Background(), &Message{Record: &kgo.Record{Key: []byte("o-1")}})
	if !errors.Is(err, lock.ErrNotObtained) || !Retryable(err) || called {
		t.Fatalf("err %v (retryable %v), called %v", err, Retryable(err), called)
	}
}

func TestLockLostIsReported(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	// No watchdog: the lease is lost when its TTL passes.
	locker := lock.New(rdb, lock.Options{Namespace: ns, TTL: 100 * time.Millisecond, RefreshEvery: -1})
	err := Lock(locker)(func(ctx context.Context, _ *Message) error {
		<-ctx.Done()
		return ctx.Err()
	})(context.Background(), &Message{Record: &kgo.Record{Key: []byte("o-1")}})
	if !errors.Is(err, lock.ErrLost) || !Retryable(err) {
		t.Fatalf("err %v, want retryable lock.ErrLost", err)
	}
}

func TestLockEntityOption(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	locker := lock.New(rdb, lock.Options{Namespace: ns})
	var got string
	h := Lock(locker, LockEntity(func(m *Message) string { return m.Header("tenant") }))(
		func(_ context.Context, m *Message) error {
			if m.Lease != nil {
				got = m.Lease.Entity()
			}
			return nil
		})
	rec := &kgo.Record{Key: []byte("o-1"), Headers: []kgo.RecordHeader{{Key: "tenant", Value: []byte("acme")}}}
	if err := h(context.Background(), &Message{Record: rec}); err != nil || got != "acme" {
		t.Fatalf("err %v, locked %q, want acme", err, got)
	}
	got = "unset"
	if err := h(context.Background(), &Message{Record: &kgo.Record{Key: []byte("o-1")}}); err != nil || got != "unset" {
		t.Fatalf("empty entity: err %v, lease %q; want no lock", err, got)
	}
}

// With AcquireAhead the next handler starts while the lease is still being acquired,
// AwaitLease returns once it is held (with m.Lease set), and the lease is released after.
func TestLockAcquireAhead(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	locker := lock.New(rdb, lock.Options{Namespace: ns, Retry: lock.FullJitter(time.Millisecond, 2*time.Millisecond)})
	ctx := context.Background()
	held, err := locker.Acquire(ctx, "o-1")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var token int64
	h := Lock(locker, AcquireAhead())(func(ctx context.Context, m *Message) error {
		close(started) // before the lease can be held: held still has it
		if err := m.AwaitLease(ctx); err != nil {
			return err
		}
		token = m.Lease.Token()
		return nil
	})
	done := make(chan error, 1)
	m := &Message{Record: &kgo.Record{Key: []byte("o-1")}}
	go func() { done <- h(ctx, m) }()
	<-started
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if token <= held.Token() {
		t.Errorf("handler saw token %d, want one after the previous holder's %d", token, held.Token())
	}
	if m.Lease != nil || m.AwaitLease(ctx) != nil {
		t.Error("lease state left on the message")
	}
	again, err := locker.Acquire(ctx, "o-1") // released: obtainable at once
	if err != nil {
		t.Fatalf("lease not released after the handler: %v", err)
	}
	_ = again.Release(ctx)
}

// With AcquireAhead a lease that cannot be obtained fails AwaitLease and the middleware
// with lock.ErrNotObtained, even when the next handler ignores AwaitLease's error.
func TestLockAcquireAheadNotObtained(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	locker := lock.New(rdb, lock.Options{Namespace: ns, MaxWait: 20 * time.Millisecond})
	ctx := context.Background()
	held, err := locker.Acquire(ctx, "o-1")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	var awaited error
	h := Lock(locker, AcquireAhead())(func(ctx context.Context, m *Message) error {
		awaited = m.AwaitLease(ctx)
		return nil
	})
	err = h(ctx, &Message{Record: &kgo.Record{Key: []byte("o-1")}})
	if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(awaited, lock.ErrNotObtained) {
		t.Fatalf("middleware: %v; AwaitLease: %v; want both lock.ErrNotObtained", err, awaited)
	}
	if !Retryable(err) {
		t.Error("not obtained must be retryable")
	}
}
