package consumer

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/internal/testenv/faultproxy"
)

// slowKey is the entity whose handling always times out in the confirmation tests.
const slowKey = "slow"

// slowOrSeq is applySeq, except that for slowKey the handler's query outlives the
// handler's own deadline: a pgconn.Timeout, an outage-class error, while Postgres
// answers.
func slowOrSeq(ctx context.Context, tx pgx.Tx, ev event.Event) error {
	if ev.Subject != slowKey {
		return applySeq(ctx, tx, ev)
	}
	qctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := tx.Exec(qctx, `SELECT pg_sleep(30)`)
	return err
}

// TestOutageConfirmation: a record whose handling always times out while Postgres
// answers its probe is dead-lettered (retries_exhausted, with the timeout) within the
// retry budget and the partition flows past it; while Postgres is really unreachable,
// nothing is dead-lettered, however many attempts the held record takes, and the same
// record is dead-lettered once Postgres answers again.
func TestOutageConfirmation(t *testing.T) {
	e := newOutageEnv(t)
	const confirmations = 3
	cfg := StandardConfig{
		DB: e.pool, DeadLetter: e.producer, Locker: e.locker, Fence: true, Name: "seq",
		Handler: slowOrSeq, Logger: slog.New(e.logs),
		Retry: RetryConfig{BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond, MaxElapsed: time.Second,
			Probes: Probes{Timeout: 500 * time.Millisecond, Confirmations: confirmations}},
	}
	h, err := Standard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	counted := func(ctx context.Context, m *Message) error {
		e.calls.Add(1)
		return h(ctx, m)
	}
	cons := e.consumer(t, counted, WithLogger(slog.New(e.logs)), WithOutageBackoff(10*time.Millisecond, 100*time.Millisecond))
	start(t, cons)

	ks := []string{"a", slowKey, "b"}
	e.produceSeq(t, ks, 1, 2)
	waitFor(t, "the records of the healthy keys", func() bool { return e.effectsNow(t) == 4 })
	waitFor(t, "the slow key's records to be dead-lettered", func() bool { return e.dlqLen(t) == 2 })
	for _, r := range readTopic(t, e.brokers, e.dlq, 2) {
		if string(r.Key) != slowKey {
			t.Errorf("dead letter of key %q, want only %q", r.Key, slowKey)
		}
		if got := header(r, HeaderDLQReason); got != ReasonRetriesExhausted {
			t.Errorf("reason %q, want %q", got, ReasonRetriesExhausted)
		}
		msg := header(r, HeaderDLQError)
		if !strings.Contains(msg, "dependencies answered their probes") || !strings.Contains(msg, "timeout") {
			t.Errorf("dead-letter error %q does not name the probes and the timeout", msg)
		}
		if n, _ := strconv.Atoi(header(r, HeaderDLQAttempts)); n < confirmations {
			t.Errorf("dead-lettered after %d attempts, want at least %d", n, confirmations)
		}
	}

	// A real outage: Postgres unreachable. The slow key's next record and the healthy
	// keys' wait; nothing is dead-lettered.
	e.pgProxy.setDown(true)
	e.produceSeq(t, ks, 3, 3)
	waitFor(t, "Health to report the outage", func() bool { return errors.Is(cons.Health(), ErrOutage) })
	held := e.calls.Load()
	// Many more attempts at the held record than its retry budget would allow a failure.
	waitFor(t, "attempts at the held record during the outage", func() bool { return e.calls.Load()-held >= 30 })
	if n := e.dlqLen(t); n != 2 {
		t.Errorf("%d dead letters after the outage's attempts, want still 2", n)
	}
	if n := e.effectsNow(t); n != 4 {
		t.Errorf("%d effects during the outage, want 4", n)
	}
	e.pgProxy.setDown(false)

	waitFor(t, "the healthy keys' record after the outage", func() bool { return e.effectsNow(t) == 6 })
	waitFor(t, "the slow key's record after the outage", func() bool { return e.dlqLen(t) == 3 })
	e.waitCommitted(t)
	if n := count(t, e.direct, `SELECT count(*) FROM entities WHERE seq = 3`); n != 2 {
		t.Errorf("%d healthy keys at seq 3, want 2", n)
	}
}

// TestRetryProbes: Retry refutes a timeout only when its probe answers. Through a hung
// connection the handler's query times out and so does the Postgres probe: the outage
// is returned at once, its budget untouched. With Postgres healthy, the same timeout
// counts against the budget and ends in ErrRetriesExhausted after at least
// Confirmations attempts. Without probes every timeout stays an outage.
func TestRetryProbes(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start("127.0.0.1:0", net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	host, port, _ := net.SplitHostPort(proxy.Addr())
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.ConnectTimeout = host, parsePort(t, port), 2*time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	slow := func(ctx context.Context, _ *Message) error {
		qctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := pool.Exec(qctx, `SELECT pg_sleep(30)`)
		return err
	}
	const confirmations = 3
	policy := RetryConfig{BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond, MaxElapsed: 200 * time.Millisecond,
		Probes: Probes{Postgres: pool.Ping, Timeout: 2 * time.Second, Confirmations: confirmations}} // generous: a loaded machine answers a ping late
	run := func(p RetryConfig) (error, int) {
		m := &Message{Record: &kgo.Record{Topic: "t"}}
		err := wrap(slow, retryInPlace(p))(context.Background(), m)
		return err, m.Attempt
	}

	t.Run("hung", func(t *testing.T) {
		if err := pool.Ping(context.Background()); err != nil { // a warm connection to hang
			t.Fatal(err)
		}
		proxy.Set(faultproxy.Faults{Hung: true})
		defer proxy.Clear()
		err, attempts := run(policy)
		if !IsOutage(err) || errors.Is(err, ErrRetriesExhausted) {
			t.Fatalf("through a hung connection: %v, want an outage", err)
		}
		if attempts != 1 {
			t.Errorf("%d attempts, want 1: a confirmed outage spends no budget", attempts)
		}
	})

	t.Run("healthy", func(t *testing.T) {
		err, attempts := run(policy)
		if !errors.Is(err, ErrRetriesExhausted) || IsOutage(err) {
			t.Fatalf("with Postgres answering: %v, want ErrRetriesExhausted and no outage", err)
		}
		if Reason(err) != ReasonRetriesExhausted {
			t.Errorf("Reason = %q, want %q", Reason(err), ReasonRetriesExhausted)
		}
		if attempts < confirmations {
			t.Errorf("%d attempts, want at least %d", attempts, confirmations)
		}
	})

	t.Run("no probes", func(t *testing.T) {
		p := policy
		p.Probes = Probes{}
		err, attempts := run(p)
		if !IsOutage(err) || attempts != 1 {
			t.Fatalf("without probes: %v after %d attempts, want an outage after 1", err, attempts)
		}
	})
}
