package consumer

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
)

func newSigner(t testing.TB) *event.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := event.NewEd25519Signer(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTrustKeys: events of a source declared with TrustKeys are applied only with a
// valid signature by one of its keys. A forged event with the right source, type and
// topic but no signature, a signature by another key or a signature over other
// contents is dead-lettered with reason "bad_signature" by Standard, fails
// StandardBatch with ErrBadSignature, and changes nothing. Records signed with either
// of two keys (a rotation) are applied; sources without keys are not checked.
func TestTrustKeys(t *testing.T) {
	e := newChainEnv(t, 1)
	oldKey, newKey, stranger := newSigner(t), newSigner(t), newSigner(t)
	keys, err := event.NewKeySet(oldKey.Key(), newKey.Key())
	if err != nil {
		t.Fatal(err)
	}
	insert := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, key, seq) VALUES ($1, $2, 0)`, ev.ID, ev.Subject)
		return err
	}
	router := func() *Router {
		return NewRouter().Handle("payment.authorized", insert).Handle("test.step", insert).
			Trust("payment", e.topic, "payment.authorized").TrustKeys("payment", keys)
	}
	standard := e.standard(t, StandardConfig{Router: router(), Name: "single"})
	batch, err := StandardBatch(StandardConfig{Router: router(), Name: "batch", DB: e.pool, DeadLetter: e.producer,
		Locker: e.locker, Fence: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(source, typ, key string, s *event.Signer) *kgo.Record {
		ev, err := event.New(source, typ, key, map[string]any{"order_id": key, "amount": 5000})
		if err != nil {
			t.Fatal(err)
		}
		r, err := event.ToRecord(e.topic, ev)
		if err != nil {
			t.Fatal(err)
		}
		if s != nil {
			s.Sign(r)
		}
		return r
	}
	ctx := context.Background()
	msg := func(r *kgo.Record) *Message { return &Message{Record: r, Group: e.group, deadLetterTopic: e.dlqOf} }

	tampered := rec("payment", "payment.authorized", "o-tampered", newKey)
	tampered.Value = []byte(`{"order_id":"o-tampered","amount":1}`)
	forged := []*kgo.Record{
		rec("payment", "payment.authorized", "o-unsigned", nil),
		rec("payment", "payment.authorized", "o-stranger", stranger),
		tampered,
	}
	for _, r := range forged {
		m := msg(r)
		if err := standard(ctx, m); err != nil {
			t.Fatalf("Standard: %v", err)
		}
		if m.Outcome != OutcomeDeadLettered || !errors.Is(m.DeadLetterCause, ErrBadSignature) ||
			!errors.Is(m.DeadLetterCause, event.ErrBadSignature) || Reason(m.DeadLetterCause) != ReasonBadSignature {
			t.Errorf("%s: outcome %v, cause %v; want dead-lettered as bad_signature", r.Key, m.Outcome, m.DeadLetterCause)
		}
		if err := batch(ctx, []*Message{msg(rec("payment", "payment.authorized", "o-ok", newKey)), msg(r)}); !errors.Is(err, ErrBadSignature) {
			t.Errorf("StandardBatch: %v, want ErrBadSignature", err)
		}
	}
	for _, r := range readTopic(t, e.brokers, e.dlq, len(forged)) {
		if reason := header(r, HeaderDLQReason); reason != ReasonBadSignature {
			t.Errorf("dead letter %s: reason %q", r.Key, reason)
		}
	}
	if n := count(t, e.pool, `SELECT count(*) FROM effects`); n != 0 {
		t.Fatalf("%d effects from forged events, want 0", n)
	}

	// Signed with the old or the new key, and an unsigned event of a source without
	// keys: applied.
	for _, r := range []*kgo.Record{
		rec("payment", "payment.authorized", "o-1", oldKey),
		rec("payment", "payment.authorized", "o-2", newKey),
		rec("anyone", "test.step", "o-3", nil),
	} {
		m := msg(r)
		if err := standard(ctx, m); err != nil || m.outcome(nil) != OutcomeHandled {
			t.Fatalf("%s: %v, outcome %v, cause %v", r.Key, err, m.Outcome, m.DeadLetterCause)
		}
	}
	if n := count(t, e.pool, `SELECT count(*) FROM effects`); n != 3 {
		t.Errorf("%d effects, want 3", n)
	}
}

// TestStandardTrustedKeys: StandardConfig.TrustedKeys checks signatures on both paths
// for a chain with a plain Handler.
func TestStandardTrustedKeys(t *testing.T) {
	e := newChainEnv(t, 1)
	s := newSigner(t)
	keys, _ := event.NewKeySet(s.Key())
	handled := 0
	h := func(context.Context, pgx.Tx, event.Event) error { handled++; return nil }
	trusted := map[string]*event.KeySet{"payment": keys}
	standard := e.standard(t, StandardConfig{Handler: h, Name: "single", TrustedKeys: trusted})
	batch, err := StandardBatch(StandardConfig{Handler: h, Name: "batch", DB: e.pool, DeadLetter: e.producer, TrustedKeys: trusted})
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := event.New("payment", "payment.authorized", "o-1", map[string]int{"amount": 1})
	good, _ := event.ToRecord(e.topic, ev)
	s.Sign(good)
	forged, _ := event.ToRecord(e.topic, ev)
	msg := func(r *kgo.Record) *Message { return &Message{Record: r, Group: e.group, deadLetterTopic: e.dlqOf} }
	ctx := context.Background()
	m := msg(forged)
	if err := standard(ctx, m); err != nil || Reason(m.DeadLetterCause) != ReasonBadSignature {
		t.Errorf("unsigned: %v, cause %v; want dead-lettered as bad_signature", err, m.DeadLetterCause)
	}
	if err := batch(ctx, []*Message{msg(forged)}); !errors.Is(err, ErrBadSignature) {
		t.Errorf("StandardBatch unsigned: %v", err)
	}
	if err := standard(ctx, msg(good)); err != nil || handled != 1 {
		t.Errorf("signed: %v, handled %d", err, handled)
	}
}

// TestVerifySignatures: the Middleware form checks what TrustKeys checks.
func TestVerifySignatures(t *testing.T) {
	s := newSigner(t)
	keys, _ := event.NewKeySet(s.Key())
	ev, _ := event.New("payment", "payment.authorized", "o-1", map[string]int{"amount": 1})
	good, _ := event.ToRecord("payments.events", ev)
	s.Sign(good)
	unsigned, _ := event.ToRecord("payments.events", ev)
	h := wrap(func(context.Context, *Message) error { return nil }, decodeRecord(), verifySignatures(map[string]*event.KeySet{"payment": keys}))
	if err := h(context.Background(), &Message{Record: good}); err != nil {
		t.Errorf("signed: %v", err)
	}
	err := h(context.Background(), &Message{Record: unsigned})
	if !errors.Is(err, ErrBadSignature) || Retryable(err) {
		t.Errorf("unsigned: %v (retryable %v), want non-retryable ErrBadSignature", err, Retryable(err))
	}
}

// TestTrustKeysOnRetryTopic: a signed record republished to the group's retry topic (a
// dead-letter replay) verifies as a record of its source topic and is applied, on both
// paths; on another group's retry topic, or signed for another topic, it is
// dead-lettered as bad_signature.
func TestTrustKeysOnRetryTopic(t *testing.T) {
	e := newChainEnv(t, 1)
	s := newSigner(t)
	keys, err := event.NewKeySet(s.Key())
	if err != nil {
		t.Fatal(err)
	}
	handled := 0
	h := func(context.Context, pgx.Tx, event.Event) error { handled++; return nil }
	trusted := map[string]*event.KeySet{"payment": keys}
	standard := e.standard(t, StandardConfig{Handler: h, Name: "single", TrustedKeys: trusted})
	batch, err := StandardBatch(StandardConfig{Handler: h, Name: "batch", DB: e.pool, DeadLetter: e.producer, TrustedKeys: trusted})
	if err != nil {
		t.Fatal(err)
	}
	// signed returns an event of key signed for topic signedFor, sitting on topic on.
	signed := func(key, signedFor, on string) *kgo.Record {
		ev, err := event.New("payment", "payment.authorized", key, map[string]int{"amount": 1})
		if err != nil {
			t.Fatal(err)
		}
		r, err := event.ToRecord(signedFor, ev)
		if err != nil {
			t.Fatal(err)
		}
		s.Sign(r)
		r.Topic = on
		return r
	}
	msg := func(r *kgo.Record) *Message { return &Message{Record: r, Group: e.group, deadLetterTopic: e.dlqOf} }
	ctx := context.Background()
	retry := RetryTopic(e.topic, e.group)

	m := msg(signed("o-1", e.topic, retry))
	if err := standard(ctx, m); err != nil || m.outcome(nil) != OutcomeHandled || handled != 1 {
		t.Errorf("replayed on the retry topic: %v, outcome %v, cause %v, handled %d", err, m.Outcome, m.DeadLetterCause, handled)
	}
	if err := batch(ctx, []*Message{msg(signed("o-2", e.topic, retry))}); err != nil || handled != 2 {
		t.Errorf("StandardBatch on the retry topic: %v, handled %d", err, handled)
	}
	for name, r := range map[string]*kgo.Record{
		"another group's retry topic": signed("o-3", e.topic, RetryTopic(e.topic, "other")),
		"signed for another topic":    signed("o-4", "payments.events", retry),
	} {
		m := msg(r)
		if err := standard(ctx, m); err != nil || Reason(m.DeadLetterCause) != ReasonBadSignature {
			t.Errorf("%s: %v, cause %v; want dead-lettered as bad_signature", name, err, m.DeadLetterCause)
		}
		if err := batch(ctx, []*Message{msg(r)}); !errors.Is(err, ErrBadSignature) {
			t.Errorf("StandardBatch, %s: %v, want ErrBadSignature", name, err)
		}
	}
	if handled != 2 {
		t.Errorf("handled %d, want 2", handled)
	}
}
