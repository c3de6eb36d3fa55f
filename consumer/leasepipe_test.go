package consumer

import (
	"context"
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// Under a backlog, a partition worker's lease is released in the same round trip as the
// next record's acquisition: pipelines carrying a release and an obtain go out. Every
// record is handled once and in order, including the runs of one entity's consecutive
// records (entity "s" on its partition), and once the consumer has stopped and the
// Locker's Wait has returned, no lock key is left in Redis.
func TestLockReleaseCarriedByNextRecord(t *testing.T) {
	e := newChainEnv(t, 2)
	rdb, ns := testenv.Redis(t)
	h := new(testenv.ScriptHook) // MultiScript: a release carried by the next acquisition
	rdb.AddHook(h)
	e.locker = newLocker(t, rdb, lock.WithNamespace(ns))
	const perKey = 30
	keys := []string{"s", "a", "b", "c"}
	recs := seqEvents(t, e.topic, keys[1:], perKey)
	recs = append(recs, seqEvents(t, e.topic, keys[:1], perKey)...) // s1 s2 … consecutive
	p := newProducer(t, e.brokers)
	produce(t, p, recs...)

	r := start(t, e.consumer(t, e.standard(t, StandardConfig{})))
	waitFor(t, "every record handled", func() bool { return e.effects(t) == len(recs) })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := e.locker.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM entities WHERE seq = $1`, perKey); n != len(keys) {
		t.Errorf("%d of %d entities complete and in order", n, len(keys))
	}
	if h.MultiScript.Load() == 0 {
		t.Error("no release went out with the next record's acquisition")
	}
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
