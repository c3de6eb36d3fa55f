package tracker_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

// TestTrackerRefusesWhatServicesRefuse is the attack on a tracker that believed what the
// services refuse: with signing on, an unsigned order.confirmed with ce_source=order
// (which the services dead-letter as bad_signature) made the saga "completed" and hid
// it from the stuck list. With the services' rules (WithTrust), it and an order.confirmed
// from a source the rules do not accept, or one that does not decode, are recorded as
// refused and change nothing; the genuine signed event completes the saga, and a
// dead-letter copy is indexed as a dead letter.
func TestTrackerRefusesWhatServicesRefuse(t *testing.T) {
	ctx := context.Background()
	db := testenv.Postgres(t)
	const topic = "orders.events"
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
	rules := consumer.NewRouter().Trust("order", topic, "order.created", "order.confirmed").TrustKeys("order", keys)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	tr, err := tracker.New(db, sagaConfig(topic), tracker.WithTrust(rules), tracker.WithMeter(mp.Meter("test")))
	if err != nil {
		t.Fatal(err)
	}
	if err := tracker.Migrate(ctx, db, ""); err != nil {
		t.Fatal(err)
	}
	record := func(source, typ string, sign bool) (*kgo.Record, event.Event) {
		t.Helper()
		ev, err := event.New(source, typ, "o-1", map[string]string{"order_id": "o-1"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := event.ToRecord(topic, ev)
		if err != nil {
			t.Fatal(err)
		}
		if sign {
			signer.Sign(r)
		}
		return r, ev
	}
	status := func() tracker.Status {
		t.Helper()
		tl, err := tr.Saga(ctx, "o-1")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range tl.Sagas {
			if s.Saga == "order" {
				return s.Status
			}
		}
		t.Fatalf("no order saga for o-1: %+v", tl)
		return ""
	}

	created, _ := record("order", "order.created", true)
	unsigned, _ := record("order", "order.confirmed", false)
	foreign, _ := record("evil", "order.confirmed", false)
	broken, _ := record("order", "order.confirmed", true)
	for i, h := range broken.Headers {
		if h.Key == event.HeaderTime {
			broken.Headers[i].Value = []byte("yesterday")
		}
	}
	for i, r := range []*kgo.Record{created, unsigned, foreign, broken} {
		r.Offset = int64(i)
	}
	n, err := tr.Ingest(ctx, created, unsigned, foreign, broken)
	if err != nil || n != 1 {
		t.Fatalf("Ingest = %d, %v; want the signed order.created alone indexed", n, err)
	}
	if s := status(); s == tracker.StatusCompleted {
		t.Fatalf("saga %s after refused order.confirmed events", s)
	}
	rej, err := tr.Rejected(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if rej.Refused != 3 {
		t.Fatalf("refused %d, want 3: %+v", rej.Refused, rej)
	}
	wantReason := map[int64]string{1: consumer.ReasonBadSignature, 2: consumer.ReasonUntrusted, 3: consumer.ReasonMalformed}
	for _, r := range rej.Latest {
		if r.Action != tracker.ActionRefused || !strings.HasPrefix(r.Detail, wantReason[r.Offset]+": ") {
			t.Errorf("rejection at %d: %s %q; want refused, %s", r.Offset, r.Action, r.Detail, wantReason[r.Offset])
		}
	}
	metrics := collect(t, reader)
	if _, ok := metrics["choreo.tracker.events.refused"]; !ok {
		t.Errorf("no choreo.tracker.events.refused metric: %v", metrics)
	}

	// Redelivered, the refused records are still refused and counted once.
	if _, err := tr.Ingest(ctx, unsigned, foreign, broken); err != nil {
		t.Fatal(err)
	}
	if rej, err = tr.Rejected(ctx, 10); err != nil || rej.Refused != 3 {
		t.Fatalf("after redelivery: refused %d, %v", rej.Refused, err)
	}

	// The dead-letter copy of the unsigned event is indexed as a dead letter; the saga
	// still waits.
	dead := deadLetterCopy(unsigned, consumer.ReasonBadSignature, "bad signature")
	if _, err := tr.Ingest(ctx, dead); err != nil {
		t.Fatal(err)
	}
	if s := status(); s == tracker.StatusCompleted {
		t.Fatalf("saga %s after a dead letter", s)
	}

	genuine, _ := record("order", "order.confirmed", true)
	genuine.Offset = 4
	if n, err := tr.Ingest(ctx, genuine); err != nil || n != 1 {
		t.Fatalf("Ingest(genuine) = %d, %v", n, err)
	}
	if s := status(); s != tracker.StatusCompleted {
		t.Fatalf("saga %s after the genuine signed order.confirmed; want completed", s)
	}
}
