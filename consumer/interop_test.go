package consumer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"

	"github.com/choreo-saga/choreo/event"
)

// recordEffect is a business handler for events of any producer: one effect per event.
func recordEffect(ctx context.Context, tx pgx.Tx, ev event.Event) error {
	_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, key, seq) VALUES ($1, $2, 0)`, ev.ID, ev.Subject)
	return err
}

// Records written by other teams' producers, produced with a plain franz-go client, are
// handled, not dead-lettered: binary mode with ids that are not UUIDs, no subject or
// correlation id and a charset parameter; structured mode; Debezium-outbox-like headers.
// Each is produced twice and has one effect: the foreign id is the idempotency key.
func TestStandardHandlesForeignProducers(t *testing.T) {
	e := newChainEnv(t, 1)
	h := e.standard(t, StandardConfig{Handler: recordEffect})
	hs := func(kv ...string) []kgo.RecordHeader {
		var out []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			out = append(out, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return out
	}
	recs := []*kgo.Record{
		{Topic: e.topic, Key: []byte("ship-1"), Value: []byte(`{"w":1}`), Headers: hs(
			"ce_specversion", "1.0", "ce_id", "A234-1234-1234", "ce_type", "shipment.created",
			"ce_source", "/shipping", "content-type", "application/json; charset=utf-8")},
		{Topic: e.topic, Key: []byte("ship-2"), Headers: hs("content-type", "application/cloudevents+json; charset=utf-8"),
			Value: []byte(`{"specversion":"1.0","id":"evt-2","type":"shipment.created","source":"sdk","data":{"w":2}}`)},
		{Topic: e.topic, Key: []byte("4711"), Value: []byte(`{"total":12}`), Headers: hs(
			"id", "5d7c8f0e-0000-4000-8000-000000000001", "ce_specversion", "1.0",
			"ce_id", "5d7c8f0e-0000-4000-8000-000000000001", "ce_type", "OrderCreated", "ce_source", "debezium")},
	}
	for _, r := range recs {
		produce(t, e.producer, r, cloneRecord(r))
	}
	start(t, e.consumer(t, h))
	e.waitCommitted(t)
	if got := e.effects(t); got != len(recs) {
		t.Fatalf("effects = %d, want %d (one per foreign event)", got, len(recs))
	}
	for _, key := range []string{"ship-1", "ship-2", "4711"} {
		if n := count(t, e.pool, `SELECT count(*) FROM effects WHERE key = $1`, key); n != 1 {
			t.Errorf("key %s: %d effects, want 1", key, n)
		}
	}
	if n := e.dlqLen(t); n != 0 {
		t.Fatalf("%d records dead-lettered, want none", n)
	}
}

// With no tracing configured at all (the otel globals are the no-op defaults: this
// package's tests never set them), the W3C trace context of the input still reaches the
// events the handler enqueues: the trace is never cut for want of setup.
func TestStandardContinuesTraceWithoutSetup(t *testing.T) {
	if fields := otel.GetTextMapPropagator().Fields(); len(fields) != 0 {
		t.Fatalf("a test set the global propagator (%v); this test needs otel's defaults", fields)
	}
	e := newChainEnv(t, 1)
	ob := migratedOutbox(t, e.pool)
	h := e.standard(t, StandardConfig{Handler: func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		next, err := event.New("test", "test.next", ev.Subject, map[string]string{"from": ev.ID})
		if err != nil {
			return err
		}
		return ob.Enqueue(ctx, tx, "next.events", next.CausedBy(ev))
	}})

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	traced := eventRecord(t, e.topic, "test.step", "k1", seqPayload{Seq: 1})
	traced.Headers = append(traced.Headers,
		kgo.RecordHeader{Key: "traceparent", Value: []byte("00-" + traceID + "-00f067aa0ba902b7-01")},
		kgo.RecordHeader{Key: "baggage", Value: []byte("tenant=acme")})
	untraced := eventRecord(t, e.topic, "test.step", "k2", seqPayload{Seq: 1})
	produce(t, e.producer, traced, untraced)
	start(t, e.consumer(t, h))
	e.waitCommitted(t)

	var headers string
	if err := e.pool.QueryRow(context.Background(),
		`SELECT headers::text FROM choreo_outbox WHERE key = 'k1'`).Scan(&headers); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(headers, `"traceparent", "00-`+traceID+`-`) {
		t.Fatalf("enqueued event lost the input's trace %s: headers %s", traceID, headers)
	}
	// Baggage members come in no fixed order (the correlation id is one of them).
	if _, bag, _ := strings.Cut(headers, `"baggage", "`); !slices.Contains(strings.Split(strings.SplitN(bag, `"`, 2)[0], ","), "tenant=acme") {
		t.Fatalf("enqueued event lost the input's baggage: headers %s", headers)
	}
	// An input without trace context starts none: no sampled trace is invented.
	if err := e.pool.QueryRow(context.Background(),
		`SELECT headers::text FROM choreo_outbox WHERE key = 'k2'`).Scan(&headers); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(headers, "traceparent") {
		t.Fatalf("untraced input produced a traceparent: %s", headers)
	}
}

// A custom Decoder handles records of a producer that writes plain JSON (type in a
// header); what it cannot decode, and events it returns that fail validation, are
// dead-lettered as malformed.
func TestStandardCustomDecoder(t *testing.T) {
	e := newChainEnv(t, 1)
	plain := func(r *kgo.Record) (event.Event, error) {
		typ := header(r, "event-type")
		if typ == "" {
			return event.Event{}, errors.New("no event-type header")
		}
		return event.Event{ID: header(r, "message-id"), Type: typ, Source: "legacy", Subject: string(r.Key),
			Time: r.Timestamp, SchemaVersion: 1, CorrelationID: string(r.Key), Data: r.Value}, nil
	}
	h := e.standard(t, StandardConfig{Handler: recordEffect, Decoder: plain})
	rec := func(key, id, typ string) *kgo.Record {
		r := &kgo.Record{Topic: e.topic, Key: []byte(key), Value: []byte(`{"n":1}`)}
		if id != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "message-id", Value: []byte(id)})
		}
		if typ != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "event-type", Value: []byte(typ)})
		}
		return r
	}
	good := rec("a", "m-1", "legacy.placed")
	produce(t, e.producer, good, cloneRecord(good), rec("b", "m-2", "legacy.placed"),
		rec("c", "m-3", "" /* the decoder refuses it */), rec("d", "" /* no id: fails Validate */, "legacy.placed"))
	start(t, e.consumer(t, h))
	e.waitCommitted(t)
	if got := e.effects(t); got != 2 {
		t.Fatalf("effects = %d, want 2 (a once, b)", got)
	}
	dlq := readTopic(t, e.brokers, e.dlq, 2)
	for _, r := range dlq {
		if reason := header(r, HeaderDLQReason); reason != ReasonMalformed {
			t.Errorf("dead letter %s: reason %q, want %q (error %q)", r.Key, reason, ReasonMalformed, header(r, HeaderDLQError))
		}
	}
	if n := e.dlqLen(t); n != 2 {
		t.Fatalf("%d dead letters, want 2", n)
	}
}
