package event

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// HeaderSignature is the record header that carries an event's signature:
// "<algorithm> <key id> <signature>", the algorithm "ed25519" or "hmac-sha256" and the
// signature in unpadded base64url, e.g. "ed25519 3f9a0c1d2e4b5a69 q83v…".
const HeaderSignature = "choreo_signature"

// Signature algorithms, the first word of HeaderSignature.
const (
	AlgEd25519    = "ed25519"
	AlgHMACSHA256 = "hmac-sha256"
)

// ErrBadSignature matches every error of KeySet.Verify: the record has no signature,
// an unparsable one, one by a key the set does not hold, or one that does not match
// its contents. It does not match ErrMalformed: the record may be well formed and
// still not come from whom it says.
var ErrBadSignature = errors.New("event: bad signature")

// ErrInvalidKey matches the errors of the key constructors and parsers for unusable key
// material.
var ErrInvalidKey = errors.New("event: invalid key")

// signedHeaders are the headers a signature covers, in this order, each by its last
// occurrence (the one FromRecord reads): every CloudEvents attribute FromRecord reads
// and the content type, which selects the content mode. A header that is absent when
// signed must be absent when verified.
var signedHeaders = [...]string{
	HeaderSpecVersion, HeaderID, HeaderType, HeaderSource, HeaderSubject, HeaderTime,
	HeaderCorrelationID, HeaderCausationID, HeaderSchemaVersion, HeaderContentType,
}

// signingInput is what a signature covers: a version tag, then the topic, key and value
// and each of signedHeaders (absent or present, and its value), each length-prefixed, so
// no two different records share an input. Binding the topic means a signed event
// replayed onto another topic does not verify. topic is the topic the record is signed
// for or verified as: r.Topic, except for KeySet.VerifyAs.
func signingInput(buf []byte, topic string, r *kgo.Record) []byte {
	buf = append(buf, "choreo-signature-v1"...)
	field := func(b []byte) {
		buf = binary.AppendUvarint(buf, uint64(len(b)))
		buf = append(buf, b...)
	}
	field([]byte(topic))
	field(r.Key)
	field(r.Value)
	for _, name := range signedHeaders {
		v, ok := lastHeader(r, name)
		if !ok {
			buf = append(buf, 0)
			continue
		}
		buf = append(buf, 1)
		field(v)
	}
	return buf
}

// lastHeader returns the value of the last header named key.
func lastHeader(r *kgo.Record, key string) ([]byte, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return r.Headers[i].Value, true
		}
	}
	return nil, false
}

// Signer signs records with one private key (Ed25519) or shared secret (HMAC-SHA256).
// It is safe for concurrent use.
type Signer struct {
	id   string
	alg  string
	priv ed25519.PrivateKey
	mac  []byte
}

// NewEd25519Signer returns a Signer for priv. Its key id is KeyID of the public key.
func NewEd25519Signer(priv ed25519.PrivateKey) (*Signer, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: an Ed25519 private key is %d bytes, not %d", ErrInvalidKey, ed25519.PrivateKeySize, len(priv))
	}
	pub := priv.Public().(ed25519.PublicKey)
	return &Signer{id: KeyID(pub), alg: AlgEd25519, priv: priv}, nil
}

// MinHMACKeyBytes is the shortest HMAC-SHA256 secret NewHMACSigner and NewHMACKey
// accept.
const MinHMACKeyBytes = 32

// NewHMACSigner returns a Signer for a shared secret of at least MinHMACKeyBytes. Its
// key id is KeyID of the secret. Every holder of the secret can sign as well as verify,
// so an HMAC key proves only that the sender is one of its holders: give each source
// its own secret, or prefer Ed25519.
func NewHMACSigner(secret []byte) (*Signer, error) {
	if len(secret) < MinHMACKeyBytes {
		return nil, fmt.Errorf("%w: an HMAC secret needs at least %d bytes, got %d", ErrInvalidKey, MinHMACKeyBytes, len(secret))
	}
	return &Signer{id: KeyID(secret), alg: AlgHMACSHA256, mac: append([]byte(nil), secret...)}, nil
}

// KeyID returns the id of a public key or shared secret: the first 8 bytes of its
// SHA-256, in hex. Ids are derived, never configured, so two keys cannot share one.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// KeyID returns the id of s's key, which HeaderSignature names.
func (s *Signer) KeyID() string { return s.id }

// Key returns the key that verifies s's signatures: the public key, or the secret.
func (s *Signer) Key() VerifyKey {
	if s.alg == AlgEd25519 {
		return VerifyKey{id: s.id, alg: s.alg, pub: s.priv.Public().(ed25519.PublicKey)}
	}
	return VerifyKey{id: s.id, alg: s.alg, mac: s.mac}
}

// Sign sets r's HeaderSignature (replacing any there) to a signature of r's topic, key,
// value and CloudEvents headers (see KeySet.Verify). Sign r after its last change of
// those: a later one breaks the signature. Headers outside the signed set, such as
// traceparent, may be added later.
func (s *Signer) Sign(r *kgo.Record) {
	var buf [512]byte
	in := signingInput(buf[:0], r.Topic, r)
	var sig []byte
	if s.alg == AlgEd25519 {
		sig = ed25519.Sign(s.priv, in)
	} else {
		m := hmac.New(sha256.New, s.mac)
		m.Write(in)
		sig = m.Sum(nil)
	}
	v := make([]byte, 0, len(s.alg)+len(s.id)+2+base64.RawURLEncoding.EncodedLen(len(sig)))
	v = append(v, s.alg...)
	v = append(v, ' ')
	v = append(v, s.id...)
	v = append(v, ' ')
	v = base64.RawURLEncoding.AppendEncode(v, sig)
	hs := r.Headers[:0:0]
	for _, h := range r.Headers {
		if h.Key != HeaderSignature {
			hs = append(hs, h)
		}
	}
	r.Headers = append(hs, kgo.RecordHeader{Key: HeaderSignature, Value: v})
}

// VerifyKey verifies signatures: an Ed25519 public key or an HMAC-SHA256 secret.
type VerifyKey struct {
	id  string
	alg string
	pub ed25519.PublicKey
	mac []byte
}

// NewEd25519Key returns the VerifyKey of an Ed25519 public key.
func NewEd25519Key(pub ed25519.PublicKey) (VerifyKey, error) {
	if len(pub) != ed25519.PublicKeySize {
		return VerifyKey{}, fmt.Errorf("%w: an Ed25519 public key is %d bytes, not %d", ErrInvalidKey, ed25519.PublicKeySize, len(pub))
	}
	return VerifyKey{id: KeyID(pub), alg: AlgEd25519, pub: append(ed25519.PublicKey(nil), pub...)}, nil
}

// NewHMACKey returns the VerifyKey of an HMAC-SHA256 secret (see NewHMACSigner).
func NewHMACKey(secret []byte) (VerifyKey, error) {
	s, err := NewHMACSigner(secret)
	if err != nil {
		return VerifyKey{}, err
	}
	return s.Key(), nil
}

// ID returns the key's id (see KeyID).
func (k VerifyKey) ID() string { return k.id }

// MarshalPEM returns an Ed25519 key as a PEM "PUBLIC KEY" block (what ParseKeys reads).
// A shared secret is never written out: for an HMAC key it returns an error matching
// ErrInvalidKey.
func (k VerifyKey) MarshalPEM() ([]byte, error) {
	if k.alg != AlgEd25519 {
		return nil, fmt.Errorf("%w: only an Ed25519 public key is written as PEM", ErrInvalidKey)
	}
	der, err := x509.MarshalPKIXPublicKey(k.pub)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// KeySet is the set of keys one source signs with. Holding the old and the new key
// while a source moves to the new one rotates keys without downtime: records signed
// with either verify. A KeySet is safe for concurrent use.
type KeySet struct {
	keys map[string]VerifyKey
}

// NewKeySet returns the set of keys. It needs at least one key; the same key twice is
// kept once.
func NewKeySet(keys ...VerifyKey) (*KeySet, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: a key set needs at least one key", ErrInvalidKey)
	}
	s := &KeySet{keys: make(map[string]VerifyKey, len(keys))}
	for _, k := range keys {
		if k.id == "" {
			return nil, fmt.Errorf("%w: zero VerifyKey", ErrInvalidKey)
		}
		s.keys[k.id] = k
	}
	return s, nil
}

// IDs returns the ids of the set's keys.
func (s *KeySet) IDs() []string {
	ids := make([]string, 0, len(s.keys))
	for id := range s.keys {
		ids = append(ids, id)
	}
	return ids
}

// Verify checks r's HeaderSignature (its last occurrence) against the set: it must be
// made by one of its keys, with that key's algorithm, over r's topic, key, value and
// CloudEvents headers as they are now. Every error matches ErrBadSignature.
func (s *KeySet) Verify(r *kgo.Record) error { return s.VerifyAs(r, r.Topic) }

// VerifyAs is Verify for a record that belongs to topic while it sits on another: it
// checks the signature as if r.Topic were topic. A consumer uses it for a record of its
// group's retry topic, which holds records of topic republished for that group alone
// (see consumer.RetryTopic): the signature, made for topic, verifies there and on no
// other topic.
func (s *KeySet) VerifyAs(r *kgo.Record, topic string) error {
	raw, ok := lastHeader(r, HeaderSignature)
	if !ok {
		return fmt.Errorf("%w: no %s header", ErrBadSignature, HeaderSignature)
	}
	alg, rest, ok1 := strings.Cut(string(raw), " ")
	id, enc, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return fmt.Errorf("%w: %s is not \"<algorithm> <key id> <signature>\"", ErrBadSignature, HeaderSignature)
	}
	k, known := s.keys[id]
	if !known {
		return fmt.Errorf("%w: unknown key id %q", ErrBadSignature, clip(id))
	}
	if alg != k.alg {
		return fmt.Errorf("%w: key %s is %s, the header says %q", ErrBadSignature, id, k.alg, clip(alg))
	}
	sig, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return fmt.Errorf("%w: signature is not unpadded base64url", ErrBadSignature)
	}
	var buf [512]byte
	in := signingInput(buf[:0], topic, r)
	if k.alg == AlgEd25519 {
		ok = len(sig) == ed25519.SignatureSize && ed25519.Verify(k.pub, in, sig)
	} else {
		m := hmac.New(sha256.New, k.mac)
		m.Write(in)
		ok = hmac.Equal(m.Sum(nil), sig)
	}
	if !ok {
		return fmt.Errorf("%w: signature by key %s does not match the record", ErrBadSignature, id)
	}
	return nil
}

// ParseSigner parses a PEM "PRIVATE KEY" block (PKCS #8) holding an Ed25519 key, as
// `openssl genpkey -algorithm ed25519` writes it.
func ParseSigner(pemText []byte) (*Signer, error) {
	block, _ := pem.Decode(pemText)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: no PEM \"PRIVATE KEY\" block", ErrInvalidKey)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: the private key is a %T, not Ed25519", ErrInvalidKey, k)
	}
	return NewEd25519Signer(priv)
}

// ParseKeys parses every PEM "PUBLIC KEY" block (PKIX) of pemText, each an Ed25519
// public key as `openssl pkey -pubout` writes it. It needs at least one key, and
// refuses a private key.
func ParseKeys(pemText []byte) ([]VerifyKey, error) {
	var keys []VerifyKey
	for rest := pemText; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		switch block.Type {
		case "PUBLIC KEY":
			k, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrInvalidKey, err)
			}
			pub, ok := k.(ed25519.PublicKey)
			if !ok {
				return nil, fmt.Errorf("%w: the public key is a %T, not Ed25519", ErrInvalidKey, k)
			}
			vk, err := NewEd25519Key(pub)
			if err != nil {
				return nil, err
			}
			keys = append(keys, vk)
		case "PRIVATE KEY":
			return nil, fmt.Errorf("%w: a private key among trusted keys; give verifiers the public key (openssl pkey -pubout)", ErrInvalidKey)
		default:
			return nil, fmt.Errorf("%w: unexpected PEM block %q", ErrInvalidKey, block.Type)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no PEM \"PUBLIC KEY\" block", ErrInvalidKey)
	}
	return keys, nil
}
