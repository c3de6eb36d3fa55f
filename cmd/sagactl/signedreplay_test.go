package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
)

// TestSignedDeadLetterReplays runs a consumer group as the services run it with signing
// on (consumer.Standard with trusted keys, Postgres idempotency records, Redis locks,
// consumer.WithRetryTopics) over a genuine signed order.created its handler fails on
// once and an unsigned one with ce_source=order (dead-lettered as bad_signature).
// Replaying the genuine dead letter (`dlq replay <topic> P:O`, to the group's retry
// topic) has it verified as a record of its source topic and handled. Replaying the
// forged one has it dead-lettered again as bad_signature, never handled; a forged copy
// written into the dead-letter topic is refused before anything is produced.
func TestSignedDeadLetterReplays(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	pool := testenv.Postgres(t)
	if err := migrate.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	rdb, ns := testenv.Redis(t)
	locker, err := lock.New(rdb, lock.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	group := "payment-" + topic
	dlq, retry := consumer.DeadLetterTopic(topic), consumer.RetryTopic(topic, group)
	for _, name := range []string{dlq, retry} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := event.NewEd25519Signer(priv)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := event.NewKeySet(signer.Key())
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu    sync.Mutex
		calls = map[string]int{} // subject -> handler calls
	)
	handler := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		mu.Lock()
		defer mu.Unlock()
		calls[ev.Subject]++
		if calls[ev.Subject] == 1 {
			return consumer.Permanent(errors.New("customer record missing"))
		}
		return nil
	}
	snapshot := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return map[string]int{"order-genuine": calls["order-genuine"], "order-forged": calls["order-forged"]}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := consumer.Standard(consumer.StandardConfig{DB: pool, Handler: handler, DeadLetter: cl, Logger: quiet,
		Locker: locker, Fence: true, TrustedKeys: map[string]*event.KeySet{"order": keys}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(brokers, group, []string{topic}, h, consumer.WithLogger(quiet), consumer.WithRetryTopics())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	}()

	for _, subject := range []string{"order-genuine", "order-forged"} {
		ev, err := event.New("order", "order.created", subject, map[string]any{"order_id": subject, "amount": 4200})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := event.ToRecord(topic, ev)
		if err != nil {
			t.Fatal(err)
		}
		if subject == "order-genuine" {
			signer.Sign(rec)
		}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// committed waits until the group has committed at least offset want on topic tp.
	committed := func(tp string, want int64) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			offs, err := adm.FetchOffsets(ctx, group)
			if o, ok := offs.Lookup(tp, 0); err == nil && ok && o.At >= want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("group did not commit %d on %s (calls %v)", want, tp, snapshot())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// deadLetters lists the dead-letter topic as `dlq list -json` does, every copy.
	deadLetters := func() []dlqRecord {
		t.Helper()
		k, err := dialKafka(ctx, conn{brokers: strings.Join(brokers, ","), timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer k.close()
		recs, err := k.readAll(ctx, dlq)
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	committed(topic, 2)
	pos := map[string]string{} // subject -> dead-letter position
	for _, r := range deadLetters() {
		pos[r.Key] = r.pos()
		if want := map[string]string{"order-genuine": consumer.ReasonPermanent, "order-forged": consumer.ReasonBadSignature}[r.Key]; r.Reason != want {
			t.Errorf("dead letter of %s: reason %q, want %q", r.Key, r.Reason, want)
		}
	}
	if got := snapshot(); len(pos) != 2 || got["order-genuine"] != 1 || got["order-forged"] != 0 {
		t.Fatalf("first delivery: dead letters %v, calls %v; want both dead-lettered, the genuine one handled once", pos, got)
	}

	code, out, errs := sagactl(t, brokers, "dlq", "replay", dlq, pos["order-genuine"], "-json")
	if code != 0 {
		t.Fatalf("replay of the genuine dead letter: exit %d: %s", code, errs)
	}
	var rep struct{ Replayed []replayed }
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Replayed) != 1 || rep.Replayed[0].Topic != retry {
		t.Fatalf("replay: %v %s, want one record to %s", err, out, retry)
	}
	committed(retry, 1)
	if got := snapshot(); got["order-genuine"] != 2 {
		t.Errorf("after the replay: calls %v, want order-genuine handled (2 calls)", got)
	}
	if recs := deadLetters(); len(recs) != 2 {
		t.Errorf("the replayed genuine record was dead-lettered again: %d dead letters, want 2 (last reason %q)", len(recs), recs[len(recs)-1].Reason)
	}

	// The dead letter of the forged record replays (it is the record at its origin) and is
	// refused again by the group, as bad_signature, on the retry topic.
	if code, _, errs := sagactl(t, brokers, "dlq", "replay", dlq, pos["order-forged"]); code != 0 {
		t.Fatalf("replay of the forged record's dead letter: exit %d: %s", code, errs)
	}
	committed(retry, 2)
	recs := deadLetters()
	if len(recs) != 3 || recs[2].Key != "order-forged" || recs[2].Reason != consumer.ReasonBadSignature || recs[2].OriginTopic != retry {
		var got []string
		for _, r := range recs {
			got = append(got, r.Key+" "+r.Reason+" from "+r.OriginTopic)
		}
		t.Errorf("dead letters after replaying the forged one: %q; want a third, order-forged, bad_signature, from %s", got, retry)
	}
	if got := snapshot(); got["order-forged"] != 0 {
		t.Errorf("the forged event was handled: calls %v", got)
	}

	// A forged copy in the dead-letter topic naming the genuine record's origin with
	// another value is refused; nothing reaches the retry topic.
	genuine := recs[0]
	if genuine.Key != "order-genuine" {
		genuine = recs[1]
	}
	forgedCopy := &kgo.Record{Topic: dlq, Key: genuine.rec.Key, Value: []byte(`{"order_id":"order-genuine","amount":1}`),
		Headers: genuine.rec.Headers}
	fpos := produceDLQ(t, cl, forgedCopy)
	before := endOffsetSum(t, brokers, retry)
	code, _, errs = sagactl(t, brokers, "dlq", "replay", dlq, fpos)
	if code != exitFailure || !strings.Contains(errs, "the value differs") {
		t.Errorf("replay of a forged copy: exit %d, want %d and a refusal: %s", code, exitFailure, errs)
	}
	if after := endOffsetSum(t, brokers, retry); after != before {
		t.Errorf("%s grew from %d to %d records on a refused replay", retry, before, after)
	}
}
