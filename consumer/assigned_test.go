package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/internal/testenv"
)

// Assigned counts the partitions a member holds and, while it holds none, says since
// when: a second member of a one-partition group idles from its start until the first
// leaves, then holds the partition.
func TestAssigned(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	group := testenv.Name(t, "g")
	nop := func(context.Context, *Message) error { return nil }
	newC := func() *Consumer {
		c, err := New(brokers, group, []string{topic}, nop, fastGroup())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first, second := newC(), newC()
	if n, since := first.Assigned(); n != 0 || !since.IsZero() {
		t.Fatalf("before Run: %d partitions, idle since %v", n, since)
	}
	r1 := start(t, first)
	waitFor(t, "first member holding the partition", func() bool {
		n, since := first.Assigned()
		return n == 1 && since.IsZero()
	})

	begun := time.Now()
	start(t, second)
	var idleSince time.Time
	waitFor(t, "second member running and idle", func() bool {
		var n int
		n, idleSince = second.Assigned()
		return n == 0 && !idleSince.IsZero()
	})
	if idleSince.Before(begun.Add(-time.Second)) {
		t.Errorf("idle since %v, before Run started at %v", idleSince, begun)
	}

	if err := r1.stop(t); err != nil {
		t.Fatal(err)
	}
	if n, since := first.Assigned(); n != 0 || since.IsZero() {
		t.Errorf("first member after Run: %d partitions, idle since %v", n, since)
	}
	waitFor(t, "second member taking the partition over", func() bool {
		n, since := second.Assigned()
		return n == 1 && since.IsZero()
	})
}
