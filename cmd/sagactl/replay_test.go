package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/migrate"
)

// TestReplayIsIdempotent proves what `dlq replay` documents: two real consumer groups
// (consumer.Standard, Postgres idempotency records, consumer.WithRetryTopics) read a
// topic; one handles an event, the other dead-letters it. Replaying the record hands it
// to the failed group only (its retry topic): the other group never sees it again.
// Replaying it again changes nothing, and -source (every group) is absorbed by the
// idempotency records.
func TestReplayIsIdempotent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	pool := testenv.Postgres(t)
	if err := migrate.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	group := func(name string) string { return name + "-" + topic }
	for _, name := range []string{topic + ".dlq", consumer.RetryTopic(topic, group("inventory")), consumer.RetryTopic(topic, group("payment"))} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu    sync.Mutex
		calls = map[string]int{} // group -> handler calls that committed or failed
	)
	handler := func(group string, failFirst bool) consumer.TxHandler {
		return func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			mu.Lock()
			defer mu.Unlock()
			calls[group]++
			if failFirst && calls[group] == 1 {
				return consumer.Permanent(errors.New("customer record missing"))
			}
			return nil
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var wg sync.WaitGroup
	for _, g := range []struct {
		group     string
		failFirst bool
	}{{"inventory", false}, {"payment", true}} {
		h, err := consumer.Standard(consumer.StandardConfig{DB: pool, Handler: handler(g.group, g.failFirst), DeadLetter: cl, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		c, err := consumer.New(brokers, group(g.group), []string{topic}, h, consumer.WithLogger(quiet), consumer.WithRetryTopics())
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(ctx); err != nil {
				t.Errorf("consumer %s: %v", g.group, err)
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()

	ev, err := event.New("order", "order.created", "order-42", map[string]any{"order_id": "order-42", "amount": 4200})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := event.ToRecord(topic, ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// committed waits until each group has committed at least its offset in want on
	// topic t.
	committed := func(t_ string, want map[string]int64) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			done := true
			for g, w := range want {
				offs, err := adm.FetchOffsets(ctx, group(g))
				o, ok := offs.Lookup(t_, 0)
				if err != nil || !ok || o.At < w {
					done = false
				}
			}
			if done {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("groups did not commit %v on %s (calls %v)", want, t_, snapshotLocked(&mu, calls))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	retry := consumer.RetryTopic(topic, group("payment"))
	snapshot := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return map[string]int{"inventory": calls["inventory"], "payment": calls["payment"]}
	}

	committed(topic, map[string]int64{"inventory": 1, "payment": 1})
	if got := snapshot(); got["inventory"] != 1 || got["payment"] != 1 {
		t.Fatalf("first delivery: calls %v, want one each", got)
	}
	if n := endOffsetSum(t, brokers, topic+".dlq"); n != 1 {
		t.Fatalf("%s.dlq holds %d records, want the payment group's failure", topic, n)
	}

	code, _, errs := sagactl(t, brokers, "dlq", "replay", topic, "0:0")
	if code != 0 {
		t.Fatalf("replay: exit %d: %s", code, errs)
	}
	committed(retry, map[string]int64{"payment": 1})
	if got := snapshot(); got["inventory"] != 1 || got["payment"] != 2 {
		t.Errorf("after replay: calls %v, want inventory 1 (never handed the record), payment 2 (handled now)", got)
	}
	if n := endOffsetSum(t, brokers, topic); n != 1 {
		t.Errorf("%s holds %d records after the replay, want 1: the replay went to %s only", topic, n, retry)
	}

	code, _, errs = sagactl(t, brokers, "dlq", "replay", topic, "0:0")
	if code != 0 {
		t.Fatalf("second replay: exit %d: %s", code, errs)
	}
	committed(retry, map[string]int64{"payment": 2})
	if got := snapshot(); got["inventory"] != 1 || got["payment"] != 2 {
		t.Errorf("after a second replay: calls %v, want no new handling (duplicate)", got)
	}

	// -source hands it to every group of the topic; both skip it as a duplicate.
	code, _, errs = sagactl(t, brokers, "dlq", "replay", topic, "0:0", "-source")
	if code != 0 {
		t.Fatalf("replay -source: exit %d: %s", code, errs)
	}
	committed(topic, map[string]int64{"inventory": 2, "payment": 2})
	if got := snapshot(); got["inventory"] != 1 || got["payment"] != 2 {
		t.Errorf("after replay -source: calls %v, want no new handling (duplicates)", got)
	}
	if n := endOffsetSum(t, brokers, topic+".dlq"); n != 1 {
		t.Errorf("%s.dlq holds %d records after the replays, want still 1", topic, n)
	}
}

func snapshotLocked(mu *sync.Mutex, calls map[string]int) map[string]int {
	mu.Lock()
	defer mu.Unlock()
	return map[string]int{"inventory": calls["inventory"], "payment": calls["payment"]}
}
