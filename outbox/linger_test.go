package outbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
)

// With BatchLinger, a row committed while the relay is idle is read at once, on its own;
// rows that keep coming one commit at a time after a small batch wait for each other and
// are published in fuller batches (the linger here is far longer than the commits take).
func TestBatchLinger(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 2)
	pool := db(t)
	ob := newOutbox(t)
	var (
		mu      sync.Mutex
		batches []int
	)
	r := start(t, pool, producer(t, brokers), ob, outbox.WithPollInterval(time.Hour),
		outbox.WithBatchLinger(2*time.Second),
		outbox.WithAfterAck(func(_ context.Context, b []outbox.Published) error {
			mu.Lock()
			defer mu.Unlock()
			batches = append(batches, len(b))
			return nil
		}))
	testenv.Eventually(t, deadline, "the relay to lead", r.relay.Leader)
	acked := func() (rows, n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range batches {
			rows += b
		}
		return rows, len(batches)
	}

	enqueue(t, pool, ob, topic, newEvent(t, "k", 1))
	testenv.Eventually(t, deadline, "the lone row to be published", func() bool { rows, _ := acked(); return rows == 1 })
	if _, n := acked(); n != 1 {
		t.Fatalf("lone row: %d batches, want 1", n)
	}

	const stream = 10
	for i := range stream {
		enqueue(t, pool, ob, topic, newEvent(t, "k", i+2)) // one commit and one Wake each
	}
	testenv.Eventually(t, deadline, "the stream to be published", func() bool { rows, _ := acked(); return rows == 1+stream })
	if _, n := acked(); n-1 > 3 {
		mu.Lock()
		t.Errorf("%d rows committed one at a time were published in %d batches %v, want at most 3", stream, n-1, batches[1:])
		mu.Unlock()
	}
	want := map[string]int{"k": 1 + stream}
	checkDelivery(t, readAll(t, brokers, topic), want)
}
