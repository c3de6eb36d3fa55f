package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// TestReplayAfterUpgradeUpcasts: a v1 record dead-lettered before an upgrade, and
// replayed with `sagactl dlq replay` after every consumer of its group moved to v2
// (a handler that declares v2 only, and a 1 → 2 upcaster), is upcast and handled once:
// the v2 handler gets the v2 payload, a second replay and a replay to the source topic
// are duplicates, and a v1 record the old consumer handled before the upgrade is a
// duplicate when it is delivered again (not a key reuse: the idempotency claim hashes
// the payload as received).
func TestReplayAfterUpgradeUpcasts(t *testing.T) {
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
	group := "inventory-" + topic
	retry := consumer.RetryTopic(topic, group)
	for _, name := range []string{topic + ".dlq", retry} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// run runs a consumer of the group with h (and ups) until the returned stop is called.
	run := func(h consumer.TxHandler, ups *consumer.Upcasters) (stop func()) {
		sh, err := consumer.Standard(consumer.StandardConfig{DB: pool, Handler: h, DeadLetter: cl, Logger: quiet, Upcasters: ups})
		if err != nil {
			t.Fatal(err)
		}
		c, err := consumer.New(brokers, group, []string{topic}, sh, consumer.WithLogger(quiet), consumer.WithRetryTopics())
		if err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		return func() {
			ccancel()
			if err := <-done; err != nil {
				t.Errorf("consumer: %v", err)
			}
		}
	}
	committed := func(t_ string, want int64) {
		t.Helper()
		testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("group commits %d on %s", want, t_), func() bool {
			offs, err := adm.FetchOffsets(ctx, group)
			o, ok := offs.Lookup(t_, 0)
			return err == nil && ok && o.At >= want
		})
	}
	produce := func(rec *kgo.Record) {
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produceV := func(id string, v int, payload string) *kgo.Record {
		ev, err := event.New("order", "order.created", id, json.RawMessage(payload))
		if err != nil {
			t.Fatal(err)
		}
		ev.SchemaVersion = v
		rec, err := event.ToRecord(topic, ev)
		if err != nil {
			t.Fatal(err)
		}
		produce(rec)
		return &kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}
	}

	// Before the upgrade: v1 producers and the v1 consumer. order-1 fails for good
	// (dead-lettered), order-2 is handled.
	type v1 struct {
		OrderID string `json:"order_id"`
		Amount  int    `json:"amount"` // euros
	}
	var v1Calls int
	stop := run(func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		v1Calls++
		var p v1
		if err := ev.DecodeData(&p); err != nil || ev.SchemaVersion != 1 {
			return consumer.Permanent(fmt.Errorf("v1 handler given version %d", ev.SchemaVersion))
		}
		if p.OrderID == "order-1" {
			return consumer.Permanent(errors.New("stock row missing"))
		}
		return nil
	}, nil)
	produceV("order-1", 1, `{"order_id":"order-1","amount":42}`)
	order2 := produceV("order-2", 1, `{"order_id":"order-2","amount":7}`)
	committed(topic, 2)
	stop()
	if v1Calls != 2 || endOffsetSum(t, brokers, topic+".dlq") != 1 {
		t.Fatalf("before the upgrade: %d v1 calls, %d dead letters; want 2 and 1", v1Calls, endOffsetSum(t, brokers, topic+".dlq"))
	}

	// After it: the consumer declares v2 only and upcasts v1; a v2 producer writes order-3.
	type v2 struct {
		OrderID     string `json:"order_id"`
		AmountCents int    `json:"amount_cents"`
	}
	ups, err := consumer.NewUpcasters(
		consumer.WithUpcaster("order.created", 1, 2, func(data json.RawMessage) (json.RawMessage, error) {
			var p v1
			if err := json.Unmarshal(data, &p); err != nil {
				return nil, err
			}
			return json.Marshal(v2{OrderID: p.OrderID, AmountCents: p.Amount * 100})
		}),
		consumer.WithDeclaredVersions("order.created", 2))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen = map[string][]v2{}
	)
	stop = run(func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		var p v2
		if err := ev.DecodeData(&p); err != nil || ev.SchemaVersion != 2 {
			return consumer.Permanent(fmt.Errorf("v2 handler given version %d", ev.SchemaVersion))
		}
		mu.Lock()
		seen[p.OrderID] = append(seen[p.OrderID], p)
		mu.Unlock()
		return nil
	}, ups)
	defer stop()
	produceV("order-3", 2, `{"order_id":"order-3","amount_cents":900}`)
	produce(order2) // redelivered after the upgrade
	committed(topic, 4)

	replay := func(args ...string) {
		t.Helper()
		code, _, errs := sagactl(t, brokers, append([]string{"dlq", "replay", topic, "0:0"}, args...)...)
		if code != 0 {
			t.Fatalf("replay %v: exit %d: %s", args, code, errs)
		}
	}
	replay()
	committed(retry, 1)
	replay()
	committed(retry, 2)
	replay("-source") // to the source topic: the group reads it there too
	committed(topic, 5)

	mu.Lock()
	defer mu.Unlock()
	if got := seen["order-1"]; len(got) != 1 || got[0].AmountCents != 4200 {
		t.Errorf("order-1 (v1, dead-lettered before the upgrade) handled as %v; want once, upcast to 4200 cents", got)
	}
	if got := seen["order-3"]; len(got) != 1 {
		t.Errorf("order-3 (v2) handled %d times, want 1", len(got))
	}
	if got := seen["order-2"]; len(got) != 0 {
		t.Errorf("order-2, handled at v1 before the upgrade and redelivered, handled again: %v", got)
	}
	if n := endOffsetSum(t, brokers, topic+".dlq"); n != 1 {
		t.Errorf("%d dead letters after the replays, want still 1", n)
	}
}
