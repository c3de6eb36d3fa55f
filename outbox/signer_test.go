package outbox_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
)

// TestWithSigner: every record the relay publishes from a signing Outbox carries a
// signature that the producer's key set verifies; an Outbox without a signer
// publishes none.
func TestWithSigner(t *testing.T) {
	brokers := testenv.Kafka(t)
	pool := db(t)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := event.NewEd25519Signer(priv)
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := event.NewKeySet(signer.Key())

	for _, signed := range []bool{true, false} {
		topic := testenv.Topic(t, brokers, 2)
		var ob *outbox.Outbox
		if signed {
			ob = newOutbox(t, outbox.WithSigner(signer))
		} else {
			ob = newOutbox(t)
		}
		enqueue(t, pool, ob, topic, newEvent(t, "order-1", 1), newEvent(t, "order-2", 1))
		r := start(t, pool, producer(t, brokers), ob)
		testenv.Eventually(t, deadline, "the outbox to drain", func() bool { return count(t, pool, "choreo_outbox") == 0 })
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		got := readAll(t, brokers, topic)
		if len(got) != 2 {
			t.Fatalf("%d records, want 2", len(got))
		}
		for _, c := range got {
			err := keys.Verify(c.rec)
			if signed && err != nil {
				t.Errorf("signed outbox: record %s does not verify: %v", c.key, err)
			}
			if !signed && err == nil {
				t.Errorf("unsigned outbox: record %s verifies", c.key)
			}
		}
	}
}
