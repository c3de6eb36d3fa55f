package lock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/internal/testenv"
)

// Two acquisitions that each took queued releases the other must wait for do not wait for
// each other: each sends what it took before it waits (without that, both would wait
// until their context ends).
func TestAwaitOthersSendsCarryFirst(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	l, err := New(rdb, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	l.releaseDelay = time.Hour                                              // only the acquisitions send them
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // deadlock guard
	defer cancel()
	x, err := l.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	y, err := l.Acquire(ctx, "y")
	if err != nil {
		t.Fatal(err)
	}
	x.ReleaseInBackground()
	carryA := l.takePending() // A will acquire y
	y.ReleaseInBackground()
	carryD := l.takePending() // D will acquire x
	var wg sync.WaitGroup
	var okA, okD bool
	wg.Go(func() { okA = l.awaitOthers(ctx, y.Key(), &carryA) })
	wg.Go(func() { okD = l.awaitOthers(ctx, x.Key(), &carryD) })
	wg.Wait()
	if !okA || !okD || carryA != nil || carryD != nil {
		t.Fatalf("awaitOthers: %v %v, carries left %d %d", okA, okD, len(carryA), len(carryD))
	}
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctx, x.Key(), y.Key()).Result(); err != nil || n != 0 {
		t.Errorf("%d lock keys left (%v)", n, err)
	}
}
