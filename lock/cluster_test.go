package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
)

// clusterEnv is a Redis Cluster of the test's own, a locker on it, and a database with
// the fence table and an effects table: one row per fenced write, in commit order.
type clusterEnv struct {
	cluster *testenv.RedisCluster
	rdb     *redis.ClusterClient
	locker  *lock.Locker
	pool    *pgxpool.Pool
}

func newClusterEnv(t *testing.T, replicas int, opts ...lock.Option) *clusterEnv {
	t.Helper()
	if os.Getenv("CHOREO_REDIS_CLUSTER") == "" {
		t.Skip("starts Redis Cluster processes (about 20 s): run with make redis-cluster (CHOREO_REDIS_CLUSTER=1)")
	}
	cl := testenv.StartRedisCluster(t, 3, replicas)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(),
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		ClusterStateReloadInterval: 500 * time.Millisecond}) // learn a promotion within about a second
	t.Cleanup(func() { rdb.Close() })
	locker, err := lock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Wait(context.Background()) })
	pool := testenv.Postgres(t)
	ctx := context.Background()
	if err := migrate.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (id bigserial PRIMARY KEY, entity text NOT NULL, token bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &clusterEnv{cluster: cl, rdb: rdb, locker: locker, pool: pool}
}

// fencedWrite records one effect of lease in a transaction guarded by its fence check.
func (e *clusterEnv) fencedWrite(ctx context.Context, lease *lock.Lease) error {
	return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if err := lease.CheckFence(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (entity, token) VALUES ($1, $2)`, lease.Entity(), lease.Token())
		return err
	})
}

// checkEffects asserts that every entity's effects carry strictly increasing tokens in
// commit order: no holder wrote after a later one, and no holding wrote twice.
func (e *clusterEnv) checkEffects(t *testing.T) int {
	t.Helper()
	var bad, total int
	err := e.pool.QueryRow(context.Background(), `
SELECT count(*) FILTER (WHERE prev IS NOT NULL AND token <= prev), count(*)
FROM (SELECT token, lag(token) OVER (PARTITION BY entity ORDER BY id) AS prev FROM effects) x`).Scan(&bad, &total)
	if err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Errorf("%d of %d effects written with a token not above the entity's previous one", bad, total)
	}
	return total
}

// TestRedisCluster runs the locker on a three-master Redis Cluster: the lock key and the
// fence counter of an entity share a hash tag, so every script runs on one node (no
// CROSSSLOT), entities spread over every master, holders of one entity never overlap,
// and AcquireAll takes entities of different slots at once.
func TestRedisCluster(t *testing.T) {
	e := newClusterEnv(t, 0)
	ctx := context.Background()
	entities := make([]string, 24)
	masters := map[string]bool{}
	for i := range entities {
		entities[i] = fmt.Sprintf("order-%d", i)
		masters[e.cluster.MasterOf(t, e.rdb, e.locker.Key(entities[i])).Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("the entities' keys live on %d masters, want 3", len(masters))
	}
	// A client that does not follow the cluster's redirects gets MOVED: an outage for a
	// consumer, never the record's failure.
	owner := e.cluster.MasterOf(t, e.rdb, e.locker.Key(entities[0]))
	for _, n := range e.cluster.Nodes {
		if n == owner {
			continue
		}
		plain := redis.NewClient(&redis.Options{Addr: n.Addr})
		err := plain.Get(ctx, e.locker.Key(entities[0])).Err()
		plain.Close()
		if _, moved := redis.IsMovedError(err); !moved || !consumer.IsOutage(err) {
			t.Errorf("GET on a node that does not own the slot: %v (moved %v), want MOVED and an outage", err, moved)
		}
		break
	}

	const workers, rounds = 6, 20
	var mu sync.Mutex
	inside := map[string]int{}
	overlaps := 0
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				entity := entities[(w*rounds+r)%len(entities)%(len(entities)/2)] // half the entities: contention
				lease, err := e.locker.Acquire(ctx, entity)
				if err != nil {
					t.Errorf("acquire %s: %v", entity, err)
					return
				}
				mu.Lock()
				inside[entity]++
				if inside[entity] > 1 {
					overlaps++
				}
				mu.Unlock()
				if err := e.fencedWrite(ctx, lease); err != nil {
					t.Errorf("fenced write %s: %v", entity, err)
				}
				mu.Lock()
				inside[entity]--
				mu.Unlock()
				if err := lease.Release(ctx); err != nil {
					t.Errorf("release %s: %v", entity, err)
				}
			}
		})
	}
	wg.Wait()
	if overlaps != 0 {
		t.Errorf("%d times two holders of one entity overlapped", overlaps)
	}
	if n := e.checkEffects(t); n != workers*rounds {
		t.Errorf("%d effects, want %d", n, workers*rounds)
	}

	leases, err := e.locker.AcquireAll(ctx, entities)
	if err != nil {
		t.Fatalf("AcquireAll over %d entities on 3 masters: %v", len(entities), err)
	}
	for _, l := range leases {
		if err := e.fencedWrite(ctx, l); err != nil {
			t.Errorf("fenced write %s: %v", l.Entity(), err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("release %s: %v", l.Entity(), err)
		}
	}
	e.checkEffects(t)
}

// TestRedisClusterFailover kills a master of a Redis Cluster (each master has a
// replica) while holders work: the replica is promoted; every error the locker returns
// meanwhile is an outage (consumer.IsOutage) or contention, never anything a consumer
// would dead-letter; the fencing tokens issued by the promoted replica are above the old
// master's; and a holder whose lock is lost in the failover (asynchronous replication
// can lose the lock's SET; deleting the key on the new master stands for that) is
// rejected by the fence check once the next holder has written.
func TestRedisClusterFailover(t *testing.T) {
	e := newClusterEnv(t, 1, lock.WithMaxWait(3*time.Second))
	ctx := context.Background()
	const stale = "order-stale"
	a, err := e.locker.Acquire(ctx, stale)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.fencedWrite(ctx, a); err != nil {
		t.Fatal(err)
	}
	victim := e.cluster.MasterOf(t, e.rdb, e.locker.Key(stale))

	// Holders keep working on entities spread over every master.
	stop := make(chan struct{})
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				entity := fmt.Sprintf("order-%d-%d", w, i%8)
				lease, err := e.locker.Acquire(ctx, entity)
				if err == nil {
					if err = e.fencedWrite(ctx, lease); err == nil {
						err = lease.Release(ctx)
					} else {
						_ = lease.Release(ctx)
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // some writes before the failover
	victim.Kill()
	killed := time.Now()
	testenv.Eventually(t, time.Minute, "the replica to be promoted", func() bool {
		return e.cluster.MasterOf(t, e.rdb, e.locker.Key(stale)).Addr != victim.Addr
	})

	// The lock of the stale holder is lost; the next holder gets a higher token. The
	// client learns the new slot map from its errors: calls may fail until it has.
	testenv.Eventually(t, time.Minute, "the lost lock's key to be deleted", func() bool {
		return e.rdb.Del(ctx, e.locker.Key(stale)).Err() == nil
	})
	t.Logf("promoted and key deleted %v after the kill", time.Since(killed))
	var b *lock.Lease
	testenv.Eventually(t, time.Minute, "a new holder after the failover", func() bool {
		b, err = e.locker.Acquire(ctx, stale)
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		return err == nil
	})
	t.Logf("new holder %v after the kill", time.Since(killed))
	if b.Token() <= a.Token() {
		t.Errorf("token after the failover %d, not above %d before it", b.Token(), a.Token())
	}
	if err := e.fencedWrite(ctx, b); err != nil {
		t.Fatalf("the new holder's fenced write: %v", err)
	}
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error { return lock.CheckFence(ctx, tx, a.Key(), a.Token()) })
	if !errors.Is(err, lock.ErrStaleToken) {
		t.Errorf("the stale holder's fence check: %v, want lock.ErrStaleToken", err)
	}
	time.Sleep(500 * time.Millisecond) // some writes after the failover
	close(stop)
	wg.Wait()
	_ = b.Release(ctx)

	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		if !consumer.IsOutage(err) && !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("an error during the failover a consumer would not wait out: %v", err)
		}
	}
	n := e.checkEffects(t)
	t.Logf("failover: %d fenced writes, %d errors during it (all outages or contention)", n, len(errs))
}
