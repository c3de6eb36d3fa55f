package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
)

// outcome is how an order's saga ended, as the order service announced it.
type outcome uint8

const (
	pending outcome = iota
	confirmed
	rejected
	cancelled
)

func outcomeOf(typ string) outcome {
	switch typ {
	case events.OrderConfirmed:
		return confirmed
	case events.OrderRejected:
		return rejected
	case events.OrderCancelled:
		return cancelled
	}
	return pending
}

// terminalEvent is an order's first terminal event as the watcher saw it.
type terminalEvent struct {
	outcome outcome
	at      time.Time // when the watcher read it
}

// watcher learns settlement only from the order service's events on orders.events,
// read from the end offsets at start: never a request to the services per order.
type watcher struct {
	cl *kgo.Client

	mu        sync.Mutex
	ended     map[string]terminalEvent // order id -> first terminal event
	confirmed []time.Time              // when each order.confirmed was read, in order
}

// startWatcher lists the end offsets of orders.events and reads from them in the
// background; no terminal event of an order placed after it returns is missed.
func startWatcher(ctx context.Context, brokers string) (*watcher, func(), error) {
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return nil, nil, fmt.Errorf("saga: kafka: %w", err)
	}
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, events.TopicOrders)
	adm.Close()
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("saga: end offsets of %s: %w", events.TopicOrders, err)
	}
	from := map[string]map[int32]kgo.Offset{events.TopicOrders: {}}
	ends.Each(func(o kadm.ListedOffset) {
		from[o.Topic][o.Partition] = kgo.NewOffset().At(o.Offset)
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumePartitions(from),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, nil, fmt.Errorf("saga: kafka: %w", err)
	}
	w := &watcher{cl: cl, ended: map[string]terminalEvent{}}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.read(wctx) })
	return w, func() { cancel(); wg.Wait(); cl.Close() }, nil
}

func (w *watcher) read(ctx context.Context) {
	for ctx.Err() == nil {
		fs := w.cl.PollFetches(ctx)
		if fs.IsClientClosed() {
			return
		}
		now := time.Now()
		w.mu.Lock()
		fs.EachRecord(func(rec *kgo.Record) {
			ev, err := event.FromRecord(rec)
			if err != nil {
				return
			}
			oc := outcomeOf(ev.Type)
			if oc == pending {
				return
			}
			if _, seen := w.ended[ev.Subject]; seen {
				return // a redelivery, or a later fact of a settled order
			}
			w.ended[ev.Subject] = terminalEvent{outcome: oc, at: now}
			if oc == confirmed {
				w.confirmed = append(w.confirmed, now)
			}
		})
		w.mu.Unlock()
	}
}

// confirmedBetween counts the order.confirmed events read in [from, to).
func (w *watcher) confirmedBetween(from, to time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, t := range w.confirmed {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// lookup returns the terminal event of order id, if one was read.
func (w *watcher) lookup(id string) (terminalEvent, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.ended[id]
	return e, ok
}
