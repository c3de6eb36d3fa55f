package rediswake_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/outbox/rediswake"
)

// deadline bounds how long a test waits for something that must happen; it is a hang
// guard, not a performance assertion.
const deadline = time.Minute

var _ outbox.WakeChannel = (*rediswake.Channel)(nil)

func TestNewRejects(t *testing.T) {
	rdb, _ := testenv.Redis(t)
	for name, call := range map[string]func() (*rediswake.Channel, error){
		"nil client":      func() (*rediswake.Channel, error) { return rediswake.New(nil, "orders") },
		"empty namespace": func() (*rediswake.Channel, error) { return rediswake.New(rdb, "") },
	} {
		if _, err := call(); !errors.Is(err, rediswake.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// subscribed runs Subscribe on table in the background and counts its wake-ups; the
// returned function cancels it and returns Subscribe's error.
func subscribed(t *testing.T, c *rediswake.Channel, table string) (wakes *atomic.Int64, stop func() error) {
	t.Helper()
	wakes = &atomic.Int64{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Subscribe(ctx, table, func() { wakes.Add(1) }) }()
	t.Cleanup(cancel)
	return wakes, func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(deadline):
			t.Fatal("Subscribe did not return after its context was cancelled")
			return nil
		}
	}
}

// A subscriber is woken once when its subscription is confirmed and once per publish on
// its table in its namespace; publishes on another table or in another namespace do not
// reach it; cancelling the context ends Subscribe with the context's error.
func TestPublishWakesSubscriber(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	ctx := context.Background()
	c, err := rediswake.New(rdb, ns+"orders")
	if err != nil {
		t.Fatal(err)
	}
	other, err := rediswake.New(rdb, ns+"payments")
	if err != nil {
		t.Fatal(err)
	}
	wakes, stop := subscribed(t, c, "choreo_outbox")
	testenv.Eventually(t, deadline, "the wake-up on subscribing", func() bool { return wakes.Load() == 1 })

	// Redis delivers one client's publishes in order: when the last arrives, the first two
	// would have, had they reached this subscriber.
	for _, pub := range []struct {
		c     *rediswake.Channel
		table string
	}{{other, "choreo_outbox"}, {c, "other_outbox"}, {c, "choreo_outbox"}} {
		if err := pub.c.Publish(ctx, pub.table); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, deadline, "the publish's wake-up", func() bool { return wakes.Load() >= 2 })
	if n := wakes.Load(); n != 2 {
		t.Errorf("%d wake-ups, want 2 (subscribing, the own table's publish)", n)
	}
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Subscribe returned %v after cancel, want context.Canceled", err)
	}
}

// A subscription whose connection the server kills ends Subscribe with an error (the
// relay subscribes again, with backoff); the new subscription wakes the subscriber once
// and receives publishes again.
func TestSubscriptionKilled(t *testing.T) {
	rdb, ns := testenv.Redis(t)
	ctx := context.Background()
	name := strings.TrimSuffix(ns, ":") // the subscriber's connection is found by its client name
	subRDB := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), ClientName: name})
	defer subRDB.Close()
	sub, err := rediswake.New(subRDB, ns+"svc")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := rediswake.New(rdb, ns+"svc")
	if err != nil {
		t.Fatal(err)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wakes atomic.Int64
	done := make(chan error, 1)
	go func() { done <- sub.Subscribe(wctx, "choreo_outbox", func() { wakes.Add(1) }) }()
	testenv.Eventually(t, deadline, "the wake-up on subscribing", func() bool { return wakes.Load() == 1 })

	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " name="+name+" ") || !strings.Contains(line, " cmd=subscribe") {
			continue
		}
		id := strings.TrimPrefix(strings.Fields(line)[0], "id=")
		if err := rdb.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
			t.Fatal(err)
		}
		killed++
	}
	if killed != 1 {
		t.Fatalf("killed %d subscriber connections named %s, want 1:\n%s", killed, name, list)
	}
	select {
	case err := <-done:
		if err == nil || errors.Is(err, context.Canceled) {
			t.Fatalf("Subscribe returned %v after its connection was killed, want the receive error", err)
		}
	case <-time.After(deadline):
		t.Fatal("Subscribe did not return after its connection was killed")
	}

	wakes.Store(0)
	go func() { done <- sub.Subscribe(wctx, "choreo_outbox", func() { wakes.Add(1) }) }()
	testenv.Eventually(t, deadline, "the wake-up on subscribing again", func() bool { return wakes.Load() == 1 })
	if err := pub.Publish(ctx, "choreo_outbox"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, deadline, "a publish after subscribing again", func() bool { return wakes.Load() == 2 })
	cancel()
	<-done
}
