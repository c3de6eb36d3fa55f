package lock_test

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// cutProxy forwards TCP to a real Redis until cut, then drops every
// connection: a network partition between the lock holder and Redis.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go p.serve()
	return p
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); up.Close() }()
		go func() { _, _ = io.Copy(c, up); c.Close() }()
	}
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// TestPartitionFromRedisLosesLease: while Redis is unreachable the
// watchdog keeps retrying, and once no refresh has succeeded for a TTL the
// lease context is cancelled with ErrLost, so the handler aborts. After the
// partition heals, Release reports ErrLost (the key expired meanwhile).
func TestPartitionFromRedisLosesLease(t *testing.T) {
	_, ns := testenv.Redis(t) // namespace, and cleanup of its keys
	proxy := newCutProxy(t, testenv.RedisAddr(t))
	client := redis.NewClient(&redis.Options{
		Addr: proxy.ln.Addr().String(), MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
	})
	t.Cleanup(func() { client.Close() })
	locker := mustNew(t, client, lock.WithNamespace(ns+"lock:"), lock.WithTTL(500*time.Millisecond), lock.WithoutRetry())
	ctx := waitCtx(t)

	lease, err := locker.Acquire(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	proxy.setCut(true)
	select {
	case <-lease.Context().Done():
	case <-ctx.Done():
		t.Fatal("lease context not cancelled during the partition")
	}
	if err := lease.Err(); !errors.Is(err, lock.ErrLost) || !strings.Contains(err.Error(), "not refreshed") {
		t.Fatalf("Err = %v, want ErrLost (not refreshed within TTL)", err)
	}
	// While cut, Acquire fails with a Redis error, which is not ErrNotObtained.
	if _, err := locker.Acquire(ctx, "other"); err == nil || errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Acquire during partition = %v, want a Redis error", err)
	}

	proxy.setCut(false)
	// Wait until Redis has expired the key too (its TTL ran on the server).
	direct, _ := testenv.Redis(t)
	testenv.Eventually(t, 30*time.Second, "the lock key to expire on the server", func() bool {
		return direct.Exists(ctx, locker.Key("e")).Val() == 0
	})
	if err := lease.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Release after partition = %v, want ErrLost", err)
	}
}
