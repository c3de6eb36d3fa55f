package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"testing"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
)

// TestTrustRules: `track run` with CHOREO_TRUSTED_KEYS refuses what the services refuse —
// an unsigned event of a source with keys, and a saga event type from another source —
// and admits a signed one; a malformed list is a usage error.
func TestTrustRules(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := event.NewEd25519Signer(priv)
	if err != nil {
		t.Fatal(err)
	}
	pub := event.AlgEd25519 + ":" + base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey))
	rules, err := trustRules("order=" + pub)
	if err != nil {
		t.Fatal(err)
	}
	admit := rules.Filter()(func(context.Context, *consumer.Message) error { return nil })
	check := func(source string, sign bool) error {
		t.Helper()
		ev, err := event.New(source, events.OrderConfirmed, "o-1", map[string]string{"order_id": "o-1"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := event.ToRecord(events.TopicOrders, ev)
		if err != nil {
			t.Fatal(err)
		}
		if sign {
			signer.Sign(r)
		}
		return admit(context.Background(), &consumer.Message{Record: r, Event: ev, Decoded: true})
	}
	if err := check(events.SourceOrder, true); err != nil {
		t.Errorf("signed order.confirmed refused: %v", err)
	}
	if err := check(events.SourceOrder, false); !errors.Is(err, consumer.ErrBadSignature) {
		t.Errorf("unsigned order.confirmed: %v, want ErrBadSignature", err)
	}
	if err := check("evil", false); !errors.Is(err, consumer.ErrUntrusted) {
		t.Errorf("order.confirmed from evil: %v, want ErrUntrusted", err)
	}
	if _, err := trustRules("order"); !errors.Is(err, errUsage) {
		t.Errorf("trustRules(order) = %v, want a usage error", err)
	}
}
