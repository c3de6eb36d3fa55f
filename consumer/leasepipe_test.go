package consumer

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// Under a backlog, a partition worker's leases are released in the background while it
// goes on: every record is handled once and in order, including the runs of one entity's
// consecutive records (entity "s" on its partition), and once the consumer has stopped and
// the Locker's Wait has returned, no lock key is left in Redis.
func TestLockBackgroundReleases(t *testing.T) {
	e := newChainEnv(t, 2)
	rdb, ns := testenv.Redis(t)
	e.locker = newLocker(t, rdb, lock.WithNamespace(ns))
	const perKey = 30
	keys := []string{"s", "a", "b", "c"}
	recs := seqEvents(t, e.topic, keys[1:], perKey)
	recs = append(recs, seqEvents(t, e.topic, keys[:1], perKey)...) // s1 s2 … consecutive
	produce(t, newProducer(t, e.brokers), recs...)

	handleAllInOrder(t, e, len(recs), perKey, len(keys))
	if n := count(t, e.pool, `SELECT count(*) FROM choreo_lock_fences WHERE entity LIKE $1`, ns+"%"); n != len(keys) {
		t.Errorf("%d fence rows, want one per entity (%d)", n, len(keys))
	}
	noLockKeysLeft(t, rdb, ns)
}

// handleAllInOrder runs e's Standard chain until its effects count n records, stops it,
// waits for the Locker's background releases and checks that each of the entities ended
// with all perKey of its records applied in order.
func handleAllInOrder(t *testing.T, e *chainEnv, n, perKey, entities int) {
	t.Helper()
	r := start(t, e.consumer(t, e.standard(t, StandardConfig{})))
	waitFor(t, "every record handled", func() bool { return e.effects(t) == n })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := e.locker.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := count(t, e.pool, `SELECT count(*) FROM entities WHERE seq = $1`, perKey); got != entities {
		t.Errorf("%d of %d entities complete and in order", got, entities)
	}
}

// noLockKeysLeft checks that no lock key (fence counters aside) is left under ns.
func noLockKeysLeft(t *testing.T, rdb *redis.Client, ns string) {
	t.Helper()
	var left []string
	iter := rdb.Scan(context.Background(), 0, ns+"*", 500).Iterator()
	for iter.Next(context.Background()) {
		if !strings.HasSuffix(iter.Val(), ":fence") {
			left = append(left, iter.Val())
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("lock keys left after shutdown: %q", left)
	}
}
