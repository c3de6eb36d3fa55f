package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
)

// How `sagactl load` learns that its orders settled, without loading the system it
// measures: it reads the order service's events on orders.events from the end offsets
// it saw at start (order.confirmed, order.rejected, order.cancelled, and
// order.cancel_requested for the CANCELLING state), and the payment and inventory
// topics only to name the event that caused a rejection. COMPENSATION_FAILED is not
// announced on a topic, so once per -poll tick one list query
// (GET /orders?state=COMPENSATION_FAILED) covers it, and, while it waits for the
// stuck-kind orders to be flagged, one GET /orders?stuck=true. Only the orders still
// unsettled when the run ends are fetched one by one, once, for the final table.

// watchTopics are the topics the settlement watcher reads: the order service's events
// decide the states; the other two name the causes.
var watchTopics = []string{events.TopicOrders, events.TopicPayments, events.TopicInventory}

// observed is one order event for an order the run has not registered yet (its POST
// answer is still on the way).
type observed struct {
	typ, causeID string
	at           time.Time
}

// settlement is the watcher's state, guarded by the loadRun's mutex.
type settlement struct {
	byID   map[string]*loadOrder // placed orders by id
	early  map[string][]observed // order events that arrived before the POST answer
	causes map[string]string     // event id -> type, for events of the saga topics
}

// stateOf maps an order service event type to the state it announces ("" for none).
func stateOf(typ string) string {
	switch typ {
	case events.OrderConfirmed:
		return "CONFIRMED"
	case events.OrderRejected:
		return "REJECTED"
	case events.OrderCancelled:
		return "CANCELLED"
	case events.OrderCancelRequested:
		return "CANCELLING"
	}
	return ""
}

// startWatch lists the end offsets of the watched topics and starts reading from them
// in the background; it returns once the offsets are known, so no event of an order
// placed afterwards can be missed. stop ends the reader and waits for it.
func (r *loadRun) startWatch(ctx context.Context, k *kafka) (stop func(), err error) {
	ends, err := k.adm.ListEndOffsets(ctx, watchTopics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: kafka: list end offsets of %v: %w (does the order service run against -brokers?)",
			errUnreachable, watchTopics, err)
	}
	from := make(map[string]map[int32]kgo.Offset)
	for t, ps := range ends {
		from[t] = make(map[int32]kgo.Offset)
		for p, o := range ps {
			from[t][p] = kgo.NewOffset().At(o.Offset)
		}
	}
	// k.opts: the seed brokers, dial timeout and security settings every sagactl client uses.
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), k.opts...),
		kgo.ConsumePartitions(from), kgo.FetchMaxWait(250*time.Millisecond))...)
	if err != nil {
		return nil, fmt.Errorf("sagactl: kafka client: %w", err)
	}
	r.mu.Lock()
	r.watch = settlement{byID: make(map[string]*loadOrder), early: make(map[string][]observed), causes: make(map[string]string)}
	r.mu.Unlock()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for wctx.Err() == nil {
			fs := cl.PollFetches(wctx)
			if fs.IsClientClosed() {
				return
			}
			// Fetch errors (a broker restarting) are retried by the client; records that do
			// not decode are not the order service's and are skipped.
			r.mu.Lock()
			fs.EachRecord(func(rec *kgo.Record) {
				ev, err := event.FromRecord(rec)
				if err != nil {
					return
				}
				if rec.Topic != events.TopicOrders {
					r.watch.causes[ev.ID] = ev.Type
					return
				}
				if stateOf(ev.Type) == "" {
					return
				}
				ob := observed{typ: ev.Type, causeID: ev.CausationID, at: ev.Time}
				if o, ok := r.watch.byID[ev.Subject]; ok {
					r.observeLocked(o, ob)
				} else {
					r.watch.early[ev.Subject] = append(r.watch.early[ev.Subject], ob)
				}
			})
			r.mu.Unlock()
		}
	})
	return func() { cancel(); wg.Wait(); cl.Close() }, nil
}

// registerLocked makes o known to the watcher once its POST answered, applying the
// events that arrived before. r.mu is held.
func (r *loadRun) registerLocked(o *loadOrder) {
	if r.watch.byID == nil {
		return
	}
	r.watch.byID[o.ID] = o
	for _, ob := range r.watch.early[o.ID] {
		r.observeLocked(o, ob)
	}
	delete(r.watch.early, o.ID)
}

// observeLocked applies one order event to o. Terminal states are final; a replayed or
// duplicated event changes nothing. r.mu is held.
func (r *loadRun) observeLocked(o *loadOrder, ob observed) {
	st := stateOf(ob.typ)
	// COMPENSATION_FAILED is the one final state an order can still leave (late facts
	// complete the cancellation): a later order.cancelled updates the outcome.
	healed := o.State == "COMPENSATION_FAILED" && terminal(st)
	if (o.settled && !healed) || st == "" || st == o.State {
		return
	}
	o.Final.History = append(o.Final.History, Transition{From: o.State, To: st, CauseEventID: ob.causeID, At: ob.at})
	o.Final.State, o.State, o.Final.StateSince = st, st, ob.at
	if terminal(st) {
		r.settleLocked(o)
	}
}

func (r *loadRun) settleLocked(o *loadOrder) {
	if o.settled {
		return
	}
	o.settled = true
	r.settled++
	r.settleElapsed = time.Since(r.start)
}

// resolveCausesLocked names the event type of each transition learnt from a topic, from
// the cause events seen on the saga topics. r.mu is held.
func (r *loadRun) resolveCausesLocked() {
	for _, o := range r.orders {
		for i := range o.Final.History {
			h := &o.Final.History[i]
			if h.CauseEventType == "" && h.CauseEventID != "" {
				h.CauseEventType = r.watch.causes[h.CauseEventID]
			}
		}
	}
}

// poll makes the per-tick list queries: orders that failed their compensation (no event
// announces it) while some are still waiting, and the stuck flags when stuck is set. Each
// is one request whatever the number of orders.
func (r *loadRun) poll(ctx context.Context, waiting bool, stuck bool) {
	if waiting {
		r.applyList(ctx, url.Values{"state": {"COMPENSATION_FAILED"}, "limit": {strconv.Itoa(maxListLimit)}})
	}
	if stuck {
		r.applyList(ctx, url.Values{"stuck": {"true"}, "limit": {strconv.Itoa(maxListLimit)}})
	}
}

// maxListLimit is the order API's largest list page.
const maxListLimit = 1000

func (r *loadRun) applyList(ctx context.Context, q url.Values) {
	list, err := r.api.List(ctx, q)
	if err != nil {
		return // the next tick tries again
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, got := range list {
		o, ok := r.watch.byID[got.ID]
		if !ok || o.settled {
			continue
		}
		if terminal(got.State) {
			o.Final.History = append(o.Final.History, Transition{From: o.State, To: got.State, At: got.StateSince})
			o.Final.State, o.State, o.Final.StateSince = got.State, got.State, got.StateSince
			r.settleLocked(o)
			continue
		}
		o.Final.Stuck = got.Stuck
		o.Final.AgeSeconds = got.AgeSeconds
		o.Final.State, o.State = got.State, got.State
	}
}

// fetchUnsettled GETs each placed order that has not settled (stuck-kind ones included),
// once, at the end of the run, for the final table.
func (r *loadRun) fetchUnsettled(ctx context.Context) {
	r.mu.Lock()
	var todo []*loadOrder
	for _, o := range r.orders {
		if o.ID != "" && !o.settled {
			todo = append(todo, o)
		}
	}
	r.mu.Unlock()
	sem := make(chan struct{}, r.cfg.concurrency)
	var wg sync.WaitGroup
	for _, o := range todo {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			got, err := r.api.Get(ctx, o.ID)
			if err != nil {
				return // keep the last known state
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			o.Final, o.State = got, got.State
			if terminal(got.State) {
				r.settleLocked(o)
			}
		})
	}
	wg.Wait()
}
