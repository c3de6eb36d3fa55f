package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/internal/testenv/faultproxy"
	"github.com/choreo-saga/choreo/outbox"
)

// retries is a slog.Handler that keeps the retry_in of every "session ended" line.
type retries struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (r *retries) Enabled(context.Context, slog.Level) bool { return true }
func (r *retries) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *retries) WithGroup(string) slog.Handler            { return r }
func (r *retries) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "outbox relay: session ended, reconnecting" {
		return nil
	}
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "retry_in" {
			r.mu.Lock()
			r.delays = append(r.delays, a.Value.Duration())
			r.mu.Unlock()
		}
		return true
	})
	return nil
}

func (r *retries) take() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.delays...)
}

// TestRelayReconnectsPromptly: during a database outage the relay's reconnect waits are
// bounded by DefaultBackoffMax (1 s) however long the outage lasts, so it leads and
// publishes again at its first or second attempt after the database returns.
func TestRelayReconnectsPromptly(t *testing.T) {
	if outbox.DefaultBackoffMax > time.Second {
		t.Fatalf("DefaultBackoffMax = %v, want at most 1s", outbox.DefaultBackoffMax)
	}
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	direct := db(t)
	proxy, proxied := proxiedPool(t, direct)

	log := &retries{}
	ob := newOutbox(t)
	r := start(t, proxied, producer(t, brokers), ob, outbox.WithLogger(slog.New(log)), outbox.WithPollInterval(50*time.Millisecond))
	testenv.Eventually(t, deadline, "the relay to lead", r.relay.Leader)
	enqueue(t, direct, ob, topic, newEvent(t, "k", 1))
	testenv.Eventually(t, deadline, "the first row to be published", func() bool { return count(t, direct, "choreo_outbox") == 0 })

	// An outage long enough for the backoff to reach its cap: with the 100 ms base the
	// bound reaches 1 s at the 5th retry.
	proxy.Set(faultproxy.Faults{Down: true})
	const failures = 8
	testenv.Eventually(t, deadline, "reconnect attempts during the outage", func() bool { return len(log.take()) >= failures })
	for i, d := range log.take() {
		if d > outbox.DefaultBackoffMax {
			t.Errorf("reconnect wait %d = %v, above DefaultBackoffMax %v", i+1, d, outbox.DefaultBackoffMax)
		}
	}

	proxy.Clear()
	before := len(log.take())
	enqueue(t, direct, ob, topic, newEvent(t, "k", 2))
	testenv.Eventually(t, deadline, "the row enqueued during the outage to be published", func() bool { return count(t, direct, "choreo_outbox") == 0 })
	// The attempt under way when the database returned may still fail; the next one leads.
	if extra := len(log.take()) - before; extra > 1 {
		t.Errorf("%d failed reconnect attempts after the database returned, want at most 1", extra)
	}
	if !r.relay.Leader() {
		t.Error("the relay does not lead after the outage")
	}
}

// TestRelaySessionConfig: with WithSessionConfig the relay's sessions (leader lock, reads,
// deletes, LISTEN) connect with that configuration, not the pool's: behind a pool whose
// path is down, the relay still leads and publishes through its direct sessions.
func TestRelaySessionConfig(t *testing.T) {
	if _, err := outbox.NewRelay(db(t), producer(t, testenv.Kafka(t)), newOutbox(t), outbox.WithSessionConfig(nil)); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("nil session config: err = %v, want ErrInvalidConfig", err)
	}
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	direct := db(t)
	cc := direct.Config().ConnConfig
	proxy, pooled := proxiedPool(t, direct)
	proxy.Set(faultproxy.Faults{Down: true})

	ob := newOutbox(t)
	r := start(t, pooled, producer(t, brokers), ob, outbox.WithSessionConfig(cc), outbox.WithPollInterval(50*time.Millisecond))
	testenv.Eventually(t, deadline, "the relay to lead through its own sessions", r.relay.Leader)
	enqueue(t, direct, ob, topic, newEvent(t, "k", 1))
	testenv.Eventually(t, deadline, "the row to be published", func() bool { return count(t, direct, "choreo_outbox") == 0 })
}

// proxiedPool returns a fault proxy in front of direct's server and a pool, with direct's
// configuration, that connects through it; both close with the test.
func proxiedPool(t *testing.T, direct *pgxpool.Pool) (*faultproxy.Proxy, *pgxpool.Pool) {
	t.Helper()
	cfg := direct.Config()
	proxy, err := faultproxy.Start("127.0.0.1:0", net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	host, port, _ := net.SplitHostPort(proxy.Addr())
	p, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return proxy, pool
}
