package event_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
)

func newEd25519(t testing.TB) (*event.Signer, ed25519.PrivateKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := event.NewEd25519Signer(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s, priv
}

func signedRecord(t testing.TB, s *event.Signer) *kgo.Record {
	t.Helper()
	r, err := event.ToRecord("payments.events", mustEvent(t))
	if err != nil {
		t.Fatal(err)
	}
	s.Sign(r)
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")})
	return r
}

func TestSignVerify(t *testing.T) {
	ed, _ := newEd25519(t)
	mac, err := event.NewHMACSigner([]byte(strings.Repeat("s", event.MinHMACKeyBytes)))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*event.Signer{ed, mac} {
		t.Run(s.Key().ID(), func(t *testing.T) {
			set, err := event.NewKeySet(s.Key())
			if err != nil {
				t.Fatal(err)
			}
			good := signedRecord(t, s)
			if err := set.Verify(good); err != nil {
				t.Fatalf("a signed record does not verify: %v", err)
			}
			tamper := map[string]func(r *kgo.Record){
				"topic":             func(r *kgo.Record) { r.Topic = "orders.events" },
				"key":               func(r *kgo.Record) { r.Key = []byte("o-2") },
				"value":             func(r *kgo.Record) { r.Value = []byte(`{"amount":1}`) },
				"source":            func(r *kgo.Record) { setHeader(r, event.HeaderSource, "inventory") },
				"type":              func(r *kgo.Record) { setHeader(r, event.HeaderType, "payment.refunded") },
				"later duplicate":   func(r *kgo.Record) { addHeader(r, event.HeaderID, "other") },
				"added attribute":   func(r *kgo.Record) { setHeader(r, event.HeaderContentType, "application/cloudevents+json") },
				"removed causation": func(r *kgo.Record) { removeHeader(r, event.HeaderCorrelationID) },
				"no signature":      func(r *kgo.Record) { removeHeader(r, event.HeaderSignature) },
				"garbled signature": func(r *kgo.Record) { setHeader(r, event.HeaderSignature, "ed25519 nope") },
				"unknown key": func(r *kgo.Record) {
					other, _ := newEd25519(t)
					other.Sign(r)
				},
			}
			for name, f := range tamper {
				r := cloneRecord(good)
				f(r)
				if err := set.Verify(r); !errors.Is(err, event.ErrBadSignature) || errors.Is(err, event.ErrMalformed) {
					t.Errorf("%s: Verify = %v, want ErrBadSignature only", name, err)
				}
			}
			// Headers outside the signed set may change (trace context is added after).
			r := cloneRecord(good)
			setHeader(r, "traceparent", "00-11111111111111111111111111111111-2222222222222222-01")
			if err := set.Verify(r); err != nil {
				t.Errorf("a changed traceparent broke the signature: %v", err)
			}
		})
	}
}

// TestVerifyAs: a record signed for payments.events and moved to a retry topic does not
// verify as a record of where it sits, verifies as one of payments.events, and as one of
// no other topic.
func TestVerifyAs(t *testing.T) {
	s, _ := newEd25519(t)
	set, err := event.NewKeySet(s.Key())
	if err != nil {
		t.Fatal(err)
	}
	r := signedRecord(t, s)
	r.Topic = "payments.events.retry.order"
	if err := set.Verify(r); !errors.Is(err, event.ErrBadSignature) {
		t.Errorf("Verify on the retry topic = %v, want ErrBadSignature", err)
	}
	if err := set.VerifyAs(r, "payments.events"); err != nil {
		t.Errorf("VerifyAs(payments.events) = %v", err)
	}
	for _, other := range []string{"orders.events", "payments.events.retry.order", ""} {
		if err := set.VerifyAs(r, other); !errors.Is(err, event.ErrBadSignature) {
			t.Errorf("VerifyAs(%q) = %v, want ErrBadSignature", other, err)
		}
	}
}

func TestVerifyAlgorithmMustMatchKey(t *testing.T) {
	ed, _ := newEd25519(t)
	r := signedRecord(t, ed)
	v := string(r.Headers[len(r.Headers)-2].Value) // the signature, before traceparent
	setHeader(r, event.HeaderSignature, strings.Replace(v, event.AlgEd25519, event.AlgHMACSHA256, 1))
	set, _ := event.NewKeySet(ed.Key())
	if err := set.Verify(r); !errors.Is(err, event.ErrBadSignature) {
		t.Fatalf("Verify = %v, want ErrBadSignature", err)
	}
}

// TestKeyRotation: a set holding the old and the new key accepts records signed by
// either, so producers move to the new key while consumers accept both.
func TestKeyRotation(t *testing.T) {
	oldKey, _ := newEd25519(t)
	newKey, _ := newEd25519(t)
	both, err := event.NewKeySet(oldKey.Key(), newKey.Key())
	if err != nil {
		t.Fatal(err)
	}
	onlyNew, _ := event.NewKeySet(newKey.Key())
	for _, s := range []*event.Signer{oldKey, newKey} {
		if err := both.Verify(signedRecord(t, s)); err != nil {
			t.Errorf("key %s: %v", s.KeyID(), err)
		}
	}
	if err := onlyNew.Verify(signedRecord(t, oldKey)); !errors.Is(err, event.ErrBadSignature) {
		t.Errorf("a retired key still verifies: %v", err)
	}
}

func TestParseKeys(t *testing.T) {
	s, priv := newEd25519(t)
	p8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	privPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8})
	parsed, err := event.ParseSigner(privPEM)
	if err != nil || parsed.KeyID() != s.KeyID() {
		t.Fatalf("ParseSigner = %v, %v", parsed, err)
	}
	other, _ := newEd25519(t)
	var pubs []byte
	for _, k := range []*event.Signer{s, other} {
		p, err := k.Key().MarshalPEM()
		if err != nil {
			t.Fatal(err)
		}
		pubs = append(pubs, p...)
	}
	keys, err := event.ParseKeys(pubs)
	if err != nil || len(keys) != 2 || keys[0].ID() != s.KeyID() || keys[1].ID() != other.KeyID() {
		t.Fatalf("ParseKeys = %v, %v", keys, err)
	}
	for name, in := range map[string][]byte{"private key": privPEM, "empty": nil, "garbage": []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")} {
		if _, err := event.ParseKeys(in); !errors.Is(err, event.ErrInvalidKey) {
			t.Errorf("%s: ParseKeys = %v, want ErrInvalidKey", name, err)
		}
	}
	if _, err := event.NewHMACSigner([]byte("short")); !errors.Is(err, event.ErrInvalidKey) {
		t.Errorf("short HMAC secret: %v", err)
	}
}

func BenchmarkSign(b *testing.B) {
	ed, _ := newEd25519(b)
	mac, _ := event.NewHMACSigner([]byte(strings.Repeat("s", 32)))
	for _, s := range []*event.Signer{ed, mac} {
		set, _ := event.NewKeySet(s.Key())
		r := signedRecord(b, s)
		alg := strings.Fields(string(r.Headers[len(r.Headers)-2].Value))[0]
		b.Run("sign/"+alg, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.Sign(r)
			}
		})
		b.Run("verify/"+alg, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := set.Verify(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func cloneRecord(r *kgo.Record) *kgo.Record {
	out := *r
	out.Headers = append([]kgo.RecordHeader(nil), r.Headers...)
	return &out
}

func setHeader(r *kgo.Record, key, value string) {
	removeHeader(r, key)
	addHeader(r, key, value)
}

func addHeader(r *kgo.Record, key, value string) {
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func removeHeader(r *kgo.Record, key string) {
	hs := r.Headers[:0:0]
	for _, h := range r.Headers {
		if h.Key != key {
			hs = append(hs, h)
		}
	}
	r.Headers = hs
}
