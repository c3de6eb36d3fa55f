// Package orderwatch is the load tools' view of the reference saga from outside: Place
// posts an order to the order API, and a Watcher learns how each order ended only from
// the order service's terminal events on orders.events, never from a request per order.
package orderwatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
)

// Outcome is how an order's saga ended, as the order service announced it.
type Outcome uint8

// The outcomes; Pending is an order with no terminal event yet.
const (
	Pending Outcome = iota
	Confirmed
	Rejected
	Cancelled
)

// String is the outcome in lower case: pending, confirmed, rejected or cancelled.
func (o Outcome) String() string {
	switch o {
	case Confirmed:
		return "confirmed"
	case Rejected:
		return "rejected"
	case Cancelled:
		return "cancelled"
	}
	return "pending"
}

// OutcomeOf returns the outcome an event type announces, Pending for any other type.
func OutcomeOf(typ string) Outcome {
	switch typ {
	case events.OrderConfirmed:
		return Confirmed
	case events.OrderRejected:
		return Rejected
	case events.OrderCancelled:
		return Cancelled
	}
	return Pending
}

// Terminal is an order's first terminal event as the Watcher saw it.
type Terminal struct {
	Outcome Outcome
	At      time.Time // when the Watcher read it
}

// Watcher keeps each order's first terminal event read from orders.events.
type Watcher struct {
	cl *kgo.Client

	mu        sync.Mutex
	ended     map[string]Terminal // order id -> first terminal event
	confirmed []time.Time         // when each order.confirmed was read, in order
}

// Start lists the end offsets of orders.events and reads from them in the background,
// so no terminal event of an order placed after it returns is missed. The returned
// function stops the Watcher and closes its client.
func Start(ctx context.Context, brokers string) (*Watcher, func(), error) {
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return nil, nil, fmt.Errorf("orderwatch: kafka: %w", err)
	}
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, events.TopicOrders)
	adm.Close()
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("orderwatch: end offsets of %s: %w", events.TopicOrders, err)
	}
	from := map[string]map[int32]kgo.Offset{events.TopicOrders: {}}
	ends.Each(func(o kadm.ListedOffset) {
		from[o.Topic][o.Partition] = kgo.NewOffset().At(o.Offset)
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumePartitions(from),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, nil, fmt.Errorf("orderwatch: kafka: %w", err)
	}
	w := &Watcher{cl: cl, ended: map[string]Terminal{}}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.read(wctx) })
	return w, func() { cancel(); wg.Wait(); cl.Close() }, nil
}

func (w *Watcher) read(ctx context.Context) {
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
			oc := OutcomeOf(ev.Type)
			if oc == Pending {
				return
			}
			if _, seen := w.ended[ev.Subject]; seen {
				return // a redelivery, or a later fact of a settled order
			}
			w.ended[ev.Subject] = Terminal{Outcome: oc, At: now}
			if oc == Confirmed {
				w.confirmed = append(w.confirmed, now)
			}
		})
		w.mu.Unlock()
	}
}

// ConfirmedBetween counts the order.confirmed events read in [from, to).
func (w *Watcher) ConfirmedBetween(from, to time.Time) int {
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

// Lookup returns the terminal event of order id, if one was read.
func (w *Watcher) Lookup(id string) (Terminal, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.ended[id]
	return e, ok
}

// ErrShed is a POST the order API shed (503, admission control): it did nothing.
var ErrShed = errors.New("POST /orders: 503 shed")

// Place posts body to url (the order API's /orders) and returns the new order's id.
func Place(ctx context.Context, client *http.Client, url string, body []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode == http.StatusServiceUnavailable {
		return "", ErrShed
	}
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("POST /orders: %d %s", resp.StatusCode, bytes.TrimSpace(b[:min(len(b), 200)]))
	}
	var o struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &o); err != nil || o.ID == "" {
		return "", fmt.Errorf("POST /orders: no id in %q", b[:min(len(b), 200)])
	}
	return o.ID, nil
}
