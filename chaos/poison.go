package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
)

// Poison kinds, with the dead-letter reason (consumer.Reason*) each must end up with.
const (
	PoisonMalformed  = "malformed-json"
	PoisonUnknown    = "unknown-type"
	PoisonOversize   = "over-payload-limit"
	PoisonCompressed = "compressed-5MB"
	PoisonKeyReuse   = "key-reuse"
	PoisonHeaders    = "1000-headers"
)

// poisonReason is the reason each poison kind must be dead-lettered with.
var poisonReason = map[string]string{
	PoisonMalformed:  "malformed",
	PoisonUnknown:    "unknown_type",
	PoisonOversize:   "malformed",
	PoisonCompressed: "malformed",
	PoisonKeyReuse:   "key_reused",
	PoisonHeaders:    "malformed",
}

// poisonRecord is one poison record the suite produced, and where it landed.
type poisonRecord struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Size      int    `json:"size"`
	Reason    string `json:"want_reason"`
}

// validEvent returns a well-formed record of type typ on topic for subject, with the
// poison markers.
func validEvent(topic, typ, subject string, data any) (*kgo.Record, error) {
	ev, err := event.New("chaos", typ, subject, data)
	if err != nil {
		return nil, fmt.Errorf("chaos: poison event: %w", err)
	}
	return event.ToRecord(topic, ev)
}

// injectPoison produces the poison records of kinds (all when empty) to the saga topics
// with a plain client: malformed JSON and unknown types on every saga topic, and on
// orders.events a payload over the decoder's 1 MiB limit, a 5 MB compressed payload whose
// dead-letter copy the broker would refuse, a reused event id with another payload, and a
// record with 1,000 headers. Each carries chaos_poison headers so the checks can find it.
func (r *run) injectPoison(ctx context.Context, kinds ...string) {
	want := func(k string) bool {
		if len(kinds) == 0 {
			return true
		}
		for _, x := range kinds {
			if x == k {
				return true
			}
		}
		return false
	}
	type item struct {
		kind string
		rec  *kgo.Record
		err  error
	}
	var items []item
	add := func(kind string, rec *kgo.Record, err error) {
		if want(kind) {
			items = append(items, item{kind, rec, err})
		}
	}
	for _, topic := range sagaTopics {
		id := "chaos-" + uuid.NewString()
		rec, err := validEvent(topic, typeOn(topic), id, map[string]string{"order_id": id})
		if err == nil {
			rec.Value = []byte(`{"order_id": "` + id + `", "amount": ` + "\x00not json")
		}
		add(PoisonMalformed, rec, err)

		id = "chaos-" + uuid.NewString()
		rec, err = validEvent(topic, "chaos.unknown_type", id, map[string]string{"order_id": id})
		add(PoisonUnknown, rec, err)
	}
	pad := func(n int) any {
		id := "chaos-" + uuid.NewString()
		return map[string]any{"order_id": id, "pad": strings.Repeat("x", n)}
	}
	{
		p := pad(1<<20 + 1024)
		id := p.(map[string]any)["order_id"].(string)
		rec, err := validEvent(events.TopicOrders, events.OrderCreated, id, p)
		add(PoisonOversize, rec, err)
	}
	{
		p := pad(5 << 20)
		id := p.(map[string]any)["order_id"].(string)
		rec, err := validEvent(events.TopicOrders, events.OrderCreated, id, p)
		add(PoisonCompressed, rec, err)
	}
	{
		id := "chaos-" + uuid.NewString()
		rec, err := validEvent(events.TopicOrders, "chaos.headers", id, map[string]string{"order_id": id})
		if err == nil {
			rec.Headers = rec.Headers[:0] // no CloudEvents headers at all: undecodable
			for i := range 1000 {
				rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "chaos_h" + strconv.Itoa(i), Value: []byte("v")})
			}
		}
		add(PoisonHeaders, rec, err)
	}
	if want(PoisonKeyReuse) {
		rec, err := r.keyReuseRecord(ctx)
		add(PoisonKeyReuse, rec, err)
	}

	for i, it := range items {
		start := time.Now()
		if it.err != nil {
			r.record(FaultPoison, it.kind, "", start, it.err)
			continue
		}
		pid := uuid.NewString()
		it.rec.Headers = append(it.rec.Headers, kgo.RecordHeader{Key: hdrPoison, Value: []byte(it.kind)},
			kgo.RecordHeader{Key: hdrPoisonID, Value: []byte(pid)})
		if it.kind != PoisonKeyReuse {
			it.rec.Partition = int32(i % r.s.opts.Partitions)
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		res, err := r.s.kcl.ProduceSync(pctx, it.rec).First()
		cancel()
		detail := fmt.Sprintf("%d bytes to %s", len(it.rec.Value), it.rec.Topic)
		if err == nil {
			detail += fmt.Sprintf(" [%d] @%d", res.Partition, res.Offset)
			r.mu.Lock()
			r.poison = append(r.poison, poisonRecord{ID: pid, Kind: it.kind, Topic: res.Topic, Partition: res.Partition,
				Offset: res.Offset, Key: string(res.Key), Size: len(it.rec.Value), Reason: poisonReason[it.kind]})
			r.mu.Unlock()
		}
		r.record(FaultPoison, it.kind, detail, start, err)
	}
}

// typeOn returns a real event type of topic.
func typeOn(topic string) string {
	switch topic {
	case events.TopicPayments:
		return events.PaymentAuthorized
	case events.TopicInventory:
		return events.StockReserved
	}
	return events.OrderCreated
}

// keyReuseRecord returns a copy of an order.created record already on orders.events (the
// same event id, so the same idempotency key) with another payload, to the same
// partition, behind the original.
func (r *run) keyReuseRecord(ctx context.Context) (*kgo.Record, error) {
	recs, err := r.s.readTopic(ctx, events.TopicOrders)
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if header(rec, event.HeaderType) != events.OrderCreated || header(rec, hdrDup) != "" || header(rec, hdrPoison) != "" {
			continue
		}
		var p map[string]any
		if json.Unmarshal(rec.Value, &p) != nil {
			continue
		}
		p["amount"] = 1 // same key, another request
		v, err := json.Marshal(p)
		if err != nil || bytes.Equal(v, rec.Value) {
			continue
		}
		return &kgo.Record{Topic: rec.Topic, Partition: rec.Partition, Key: rec.Key, Value: v, Headers: append([]kgo.RecordHeader(nil), rec.Headers...)}, nil
	}
	return nil, fmt.Errorf("chaos: key reuse: no order.created record on %s yet", events.TopicOrders)
}
