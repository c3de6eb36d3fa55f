package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const defaultRedisAddr = "127.0.0.1:6379"

var redisOnce = sync.OnceValue(func() resolved {
	if addr := os.Getenv("CHOREO_TEST_REDIS_ADDR"); addr != "" {
		return resolved{addr, pingRedis(addr)}
	}
	err := pingRedis(defaultRedisAddr)
	if err == nil {
		return resolved{value: defaultRedisAddr}
	}
	if dockerAvailable() {
		addr, cerr := containerAddr("redis")
		if cerr != nil {
			return resolved{err: fmt.Errorf("%v; testcontainers: %w", err, cerr)}
		}
		return resolved{addr, pingRedis(addr)}
	}
	return resolved{err: err}
})

func pingRedis(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 2 * time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// RedisAddr returns the address of the Redis server tests use.
func RedisAddr(t testing.TB) string {
	t.Helper()
	r := redisOnce()
	if r.err != nil {
		need(t, "Redis", r.err, `redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no  (CHOREO_TEST_REDIS_ADDR=host:port)`)
	}
	return r.value
}

// Redis returns a client and a key namespace (e.g. "choreo_t_mytest_1a2b3c4d5e:") unique to
// this test. Keep every key under the namespace: they are deleted, and the client closed,
// when the test ends.
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: RedisAddr(t)})
	ns := Name(t, "choreo_t") + ":"
	t.Cleanup(func() {
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, ns+"*", 500).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("testenv: clean redis namespace %s: %v", ns, err)
		}
	})
	return c, ns
}
