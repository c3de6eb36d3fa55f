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
	locker := newLocker(t, rdb, lock.WithNamespace(ns), lock.WithRetryBackoff(time.Millisecond, 5*time.Millisecond))
	var inside, maxInside atomic.Int32
	h := holdLock(locker, nil)(func(ctx context.Context, m *Message) error {
		if m.lease == nil || m.lease.Entity() != "o-1" {
			t.Errorf("lease %+v inside the handler", m.lease)
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
			if m.lease != nil {
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
	locker := newLocker(t, rdb, lock.WithNamespace(ns), lock.WithMaxWait(20*time.Millisecond))
	held, err := locker.Acquire(context.Background(), "o-1")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	called := false
	err = holdLock(locker, nil)(func(context.Context, *Message) error { called = true; return nil })(
		context.Background(), &Message{Record: &kgo.Record{Key: []byte("o-1")}})
	if !errors.Is(err, lock.ErrNotObtained) || !Retryable(err) || called {
		t.Fatalf("err %v (retryable %v), called %v", err, Retryable(err), called)
	}
}

func TestLockLostIsReported(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	// No watchdog: the lease is lost when its TTL passes.
	locker := newLocker(t, rdb, lock.WithNamespace(ns), lock.WithTTL(100*time.Millisecond), lock.WithoutWatchdog())
	err := holdLock(locker, nil)(func(ctx context.Context, _ *Message) error {
		<-ctx.Done()
		return ctx.Err()
	})(context.Background(), &Message{Record: &kgo.Record{Key: []byte("o-1")}})
	if !errors.Is(err, lock.ErrLost) || !Retryable(err) {
		t.Fatalf("err %v, want retryable lock.ErrLost", err)
	}
}

func TestLockEntityOption(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	locker := newLocker(t, rdb, lock.WithNamespace(ns))
	var got string
	h := holdLock(locker, func(_ context.Context, m *Message) (string, error) { return m.Header("tenant"), nil })(
		func(_ context.Context, m *Message) error {
			if m.lease != nil {
				got = m.lease.Entity()
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
	// The function gets the record's context; its error fails the handling before the
	// handler runs.
	type ctxKey struct{}
	errLookup := errors.New("lookup failed")
	ran := false
	failing := holdLock(locker, func(ctx context.Context, _ *Message) (string, error) {
		if ctx.Value(ctxKey{}) != "record" {
			t.Error("the entity function did not get the record's context")
		}
		return "", errLookup
	})(func(context.Context, *Message) error { ran = true; return nil })
	ctx := context.WithValue(context.Background(), ctxKey{}, "record")
	if err := failing(ctx, &Message{Record: rec}); !errors.Is(err, errLookup) || ran {
		t.Fatalf("entity error: err %v, handler ran %v; want errLookup and no run", err, ran)
	}
}

// Lock waits for the entity's current holder, the handler sees a newer lease than the
// previous holder's, and the lease is released after the handler.
func TestLockWaitsForTheHolder(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	locker := newLocker(t, rdb, lock.WithNamespace(ns), lock.WithRetryBackoff(time.Millisecond, 2*time.Millisecond))
	ctx := context.Background()
	held, err := locker.Acquire(ctx, "o-1")
	if err != nil {
		t.Fatal(err)
	}
	var token int64
	h := holdLock(locker, nil)(func(ctx context.Context, m *Message) error {
		token = m.lease.Token()
		return nil
	})
	done := make(chan error, 1)
	m := &Message{Record: &kgo.Record{Key: []byte("o-1")}}
	go func() { done <- h(ctx, m) }()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if token <= held.Token() {
		t.Errorf("handler saw token %d, want one after the previous holder's %d", token, held.Token())
	}
	if m.lease != nil {
		t.Error("lease left on the message")
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := locker.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	again, err := locker.Acquire(ctx, "o-1") // released: obtainable at once
	if err != nil {
		t.Fatalf("lease not released after the handler: %v", err)
	}
	_ = again.Release(ctx)
}
