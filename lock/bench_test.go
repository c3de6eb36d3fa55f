package lock_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// BenchmarkAcquireRelease measures one uncontended lease (Locker.Acquire +
// Lease.Release) against real Redis, next to the floor measured in the same
// run: a naive lock made of SET NX PX + DEL (two round trips, no owner
// check, no fencing token, no watchdog).
//
//	go test -run '^$' -bench AcquireRelease -benchmem -count 5 ./lock/
func BenchmarkAcquireRelease(b *testing.B) {
	client, ns := testenv.Redis(b)
	ctx := context.Background()

	b.Run("SetNXPX+Del", func(b *testing.B) {
		key := ns + "naive:{e}"
		for b.Loop() {
			ok, err := client.SetNX(ctx, key, "v", 10*time.Second).Result()
			if err != nil || !ok {
				b.Fatalf("set nx: %v %v", ok, err)
			}
			if err := client.Del(ctx, key).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Lease", func(b *testing.B) {
		locker := mustNew(b, client, lock.WithNamespace(ns+"lock:"))
		for b.Loop() {
			lease, err := locker.Acquire(ctx, "e")
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	// Parallel variants: 4×GOMAXPROCS goroutines (8 on the 2-core bench
	// machine, like bench/guards' 8 clients), each on its own entity,
	// sharing one client and its connection pool, like a consumer.
	b.Run("SetNXPX+Del/parallel", func(b *testing.B) {
		var n atomic.Int64
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			key := ns + "naive:{" + strconv.FormatInt(n.Add(1), 10) + "}"
			for pb.Next() {
				ok, err := client.SetNX(ctx, key, "v", 10*time.Second).Result()
				if err != nil || !ok {
					b.Errorf("set nx: %v %v", ok, err)
					return
				}
				if err := client.Del(ctx, key).Err(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("Lease/parallel", func(b *testing.B) {
		locker := mustNew(b, client, lock.WithNamespace(ns+"lock:"))
		var n atomic.Int64
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			entity := "p" + strconv.FormatInt(n.Add(1), 10)
			for pb.Next() {
				lease, err := locker.Acquire(ctx, entity)
				if err != nil {
					b.Error(err)
					return
				}
				if err := lease.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// bench16 is the entity set of the batch benchmarks: 16 distinct entities,
// like a consumer batch of 16 records for 16 orders.
var bench16 = func() []string {
	es := make([]string, 16)
	for i := range es {
		es[i] = "order-" + strconv.Itoa(i)
	}
	return es
}()

// BenchmarkAcquireAll16 measures obtaining and releasing the leases of 16
// entities with AcquireAll and ReleaseAll (one pipeline each way); compare
// with BenchmarkAcquire16Sequential, the same work one lease at a time.
//
//	go test -run '^$' -bench 'Acquire(All)?16' -benchmem -count 5 ./lock/
func BenchmarkAcquireAll16(b *testing.B) {
	client, ns := testenv.Redis(b)
	locker := mustNew(b, client, lock.WithNamespace(ns+"lock:"))
	ctx := context.Background()
	for b.Loop() {
		leases, err := locker.AcquireAll(ctx, bench16)
		if err != nil {
			b.Fatal(err)
		}
		if err := lock.ReleaseAll(ctx, leases); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquire16Sequential measures what the consumer's batch mode did
// before AcquireAll: 16 Acquire calls in entity order, then 16 Release
// calls (32 round trips).
func BenchmarkAcquire16Sequential(b *testing.B) {
	client, ns := testenv.Redis(b)
	locker := mustNew(b, client, lock.WithNamespace(ns+"lock:"))
	ctx := context.Background()
	leases := make([]*lock.Lease, len(bench16))
	for b.Loop() {
		for i, e := range bench16 {
			lease, err := locker.Acquire(ctx, e)
			if err != nil {
				b.Fatal(err)
			}
			leases[i] = lease
		}
		for _, lease := range leases {
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}
