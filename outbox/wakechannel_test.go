package outbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/outbox/rediswake"
)

// TestWakeChannel: with polling off, a writer in "another process" (an Outbox whose
// relay does not run here) wakes the leader through the wake channel alone: its commits
// carry no pg_notify and it sends no NOTIFY even with a notifier set. When the leader's
// subscription is killed, the relay subscribes again by itself and wake-ups flow again.
func TestWakeChannel(t *testing.T) {
	ctx := context.Background()
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 2)
	pool, tr := tracedDB(t)
	rdb, ns := testenv.Redis(t)
	name := strings.TrimSuffix(ns, ":") // the leader's Redis connections are found by this client name
	leaderRDB := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), ClientName: name})
	defer leaderRDB.Close()
	leaderChannel, err := rediswake.New(leaderRDB, ns+"svc")
	if err != nil {
		t.Fatal(err)
	}
	writerChannel, err := rediswake.New(rdb, ns+"svc")
	if err != nil {
		t.Fatal(err)
	}

	r := start(t, pool, producer(t, brokers), newOutbox(t, outbox.WithWakeChannel(leaderChannel)),
		outbox.WithPollInterval(time.Hour), outbox.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	testenv.Eventually(t, deadline, "the relay to lead", r.relay.Leader)
	notifier := &countingNotifier{pool: pool}
	writer := newOutbox(t, outbox.WithNotifier(notifier), outbox.WithWakeChannel(writerChannel))
	subscriber := func() string { // the id of the leader's subscription connection, once it exists
		list, err := rdb.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " name="+name+" ") && strings.Contains(line, " cmd=subscribe") {
				return strings.TrimPrefix(strings.Fields(line)[0], "id=")
			}
		}
		return ""
	}
	want := map[string]int{}
	write := func(what string) {
		t.Helper()
		for range 3 {
			want["k"]++
			time.Sleep(2 * outbox.NotifySpacing) // a quiet spell: a NOTIFY would ride the commit
			tr.Take()
			enqueue(t, pool, writer, topic, newEvent(t, "k", want["k"]))
			if got := strings.Join(tr.Take(), " | "); got != "begin; insert; commit" {
				t.Errorf("%s: the writer's round trips: %s; want begin; insert; commit (no pg_notify)", what, got)
			}
			testenv.Eventually(t, deadline, what, func() bool { return count(t, pool, "choreo_outbox") == 0 })
		}
	}
	testenv.Eventually(t, deadline, "the leader to subscribe", func() bool { return subscriber() != "" })
	write("a publish to wake the leader")

	old := subscriber()
	if err := rdb.Do(ctx, "CLIENT", "KILL", "ID", old).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, deadline, "a new subscription", func() bool { s := subscriber(); return s != "" && s != old })
	write("a publish to wake the leader after its subscription was killed")

	if n := notifier.seen(); n != 0 {
		t.Errorf("%d NOTIFYs sent with a wake channel set, want 0", n)
	}
	checkDelivery(t, readAll(t, brokers, topic), want)
}
