package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
)

// The test type "test.step" in three schema versions:
//
//	v1 {"seq": N}
//	v2 {"sequence": N}                 (renamed)
//	v3 {"sequence": N, "unit": "step"} (a field added)
type stepV2 struct {
	Sequence int `json:"sequence"`
}

type stepV3 struct {
	Sequence int    `json:"sequence"`
	Unit     string `json:"unit"`
}

// errNegative is what the v1 → v2 upcaster refuses.
var errNegative = errors.New("negative sequence")

func stepV1to2(data json.RawMessage) (json.RawMessage, error) {
	var p seqPayload
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, err
	}
	if p.Seq < 0 {
		return nil, errNegative
	}
	return json.Marshal(stepV2{Sequence: p.Seq})
}

func stepV2to3(data json.RawMessage) (json.RawMessage, error) {
	var p stepV2
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, err
	}
	return json.Marshal(stepV3{Sequence: p.Sequence, Unit: "step"})
}

// stepUpcasters upcasts test.step to v3, the version its handler declares.
func stepUpcasters(t testing.TB) *Upcasters {
	t.Helper()
	u, err := NewUpcasters(
		WithUpcaster("test.step", 1, 2, stepV1to2),
		WithUpcaster("test.step", 2, 3, stepV2to3),
		WithDeclaredVersions("test.step", 3),
	)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// versioned is eventRecord at schema version v with a raw JSON payload.
func versioned(t testing.TB, topic, key string, v int, payload string) *kgo.Record {
	t.Helper()
	ev, err := event.New("test", "test.step", key, json.RawMessage(payload))
	if err != nil {
		t.Fatal(err)
	}
	ev.SchemaVersion = v
	r, err := event.ToRecord(topic, ev)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// v3Handler records every event it is given; it fails permanently for any version but
// 3 (what it declares) and applies the step as applySeq does.
type v3Handler struct {
	mu   sync.Mutex
	seen map[int]int // schema version → events given
}

func (h *v3Handler) handle(ctx context.Context, tx pgx.Tx, ev event.Event) error {
	h.mu.Lock()
	if h.seen == nil {
		h.seen = map[int]int{}
	}
	h.seen[ev.SchemaVersion]++
	h.mu.Unlock()
	if ev.SchemaVersion != 3 {
		return Permanent(fmt.Errorf("handler given version %d", ev.SchemaVersion))
	}
	var p stepV3
	if err := ev.DecodeData(&p); err != nil {
		return err
	}
	if p.Unit != "step" {
		return Permanent(fmt.Errorf("v3 payload without its unit: %s", ev.Data))
	}
	v1 := ev
	v1.Data, _ = json.Marshal(seqPayload{Seq: p.Sequence})
	return applySeq(ctx, tx, v1)
}

func (h *v3Handler) versions() map[int]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[int]int{}
	for v, n := range h.seen {
		out[v] = n
	}
	return out
}

// TestUpcastChains: a consumer whose handler declares version 3 of test.step, consuming
// a topic holding v1, v2 and v3 records of it (and copies), handles every one once at
// v3, in order per key, on the one-record path and in batch mode: v1 goes through both
// upcasters, v2 through one, v3 through none. A v4 record (no path to v3) is
// dead-lettered as unsupported_version and a v1 record the upcaster refuses as
// upcast_failed, each with its original value and version; the records behind them
// are not held up.
func TestUpcastChains(t *testing.T) {
	for _, mode := range []string{"single", "batch"} {
		t.Run(mode, func(t *testing.T) {
			e := newChainEnv(t, 2)
			ks := keys(6)
			payload := func(v, seq int) string {
				switch v {
				case 1:
					return fmt.Sprintf(`{"seq":%d}`, seq)
				case 2:
					return fmt.Sprintf(`{"sequence":%d}`, seq)
				}
				return fmt.Sprintf(`{"sequence":%d,"unit":"step"}`, seq)
			}
			const perKey = 9
			var recs []*kgo.Record
			for seq := 1; seq <= perKey; seq++ {
				for i, k := range ks {
					v := 1 + (seq+i)%3 // every key sees every version
					r := versioned(t, e.topic, k, v, payload(v, seq))
					recs = append(recs, r)
					if seq == 4 {
						recs = append(recs, cloneRecord(r)) // a redelivered copy
					}
				}
			}
			tooNew := versioned(t, e.topic, "poison-new", 4, `{"sequence":1,"unit":"step","extra":true}`)
			refused := versioned(t, e.topic, "poison-neg", 1, `{"seq":-1}`)
			recs = append(recs[:len(recs)/2], append([]*kgo.Record{tooNew, refused}, recs[len(recs)/2:]...)...)
			produce(t, e.producer, recs...)

			h := &v3Handler{}
			cfg := StandardConfig{Router: NewRouter().Handle("test.step", h.handle), Upcasters: stepUpcasters(t)}
			single := e.standard(t, cfg)
			var opts []Option
			if mode == "batch" {
				cfg.DB, cfg.DeadLetter, cfg.Locker, cfg.Name, cfg.Fence = e.pool, e.producer, e.locker, "seq", true
				batch, err := StandardBatch(cfg)
				if err != nil {
					t.Fatal(err)
				}
				opts = append(opts, WithBatch(16, batch), WithMaxBuffered(64))
			}
			start(t, e.consumer(t, single, opts...))
			e.waitCommitted(t)

			total := len(ks) * perKey
			if n := e.effects(t); n != total {
				t.Errorf("%d effects, want %d (one per event)", n, total)
			}
			if n := count(t, e.pool, `SELECT count(*) FROM entities WHERE seq = $1`, perKey); n != len(ks) {
				t.Errorf("%d of %d keys complete and in order", n, len(ks))
			}
			if got := h.versions(); len(got) != 1 || got[3] == 0 {
				t.Errorf("the handler was given versions %v; want 3 only", got)
			}
			dead := readTopic(t, e.brokers, e.dlq, 2)
			if n := e.dlqLen(t); n != 2 {
				t.Errorf("%d dead letters, want 2", n)
			}
			for _, d := range dead {
				want, orig := ReasonUnsupported, tooNew
				if string(d.Key) == "poison-neg" {
					want, orig = ReasonUpcastFailed, refused
				}
				if got := header(d, HeaderDLQReason); got != want {
					t.Errorf("dead letter %s: reason %q, want %q (error %s)", d.Key, got, want, header(d, HeaderDLQError))
				}
				if string(d.Value) != string(orig.Value) || header(d, event.HeaderSchemaVersion) != header(orig, event.HeaderSchemaVersion) {
					t.Errorf("dead letter %s: value %s version %s, want the original %s version %s", d.Key,
						d.Value, header(d, event.HeaderSchemaVersion), orig.Value, header(orig, event.HeaderSchemaVersion))
				}
			}
		})
	}
}

// TestUpcastSignedAndClaimedAsReceived: a signed v1 record is verified as it was signed
// (the upcast payload would not verify), then upcast: the v2 handler applies it. The
// idempotency claim is taken on the record as received: the same v1 record, handled by
// the v1 chain before an upgrade, is a duplicate to the upcasting chain after it (not
// a key reuse), and a tampered copy is still refused as bad_signature, on both paths.
func TestUpcastSignedAndClaimedAsReceived(t *testing.T) {
	e := newChainEnv(t, 1)
	s := newSigner(t)
	keys, err := event.NewKeySet(s.Key())
	if err != nil {
		t.Fatal(err)
	}
	trusted := map[string]*event.KeySet{"test": keys}
	signed := func(key string, seq int) *kgo.Record {
		r := versioned(t, e.topic, key, 1, fmt.Sprintf(`{"seq":%d}`, seq))
		s.Sign(r)
		return r
	}
	var (
		mu    sync.Mutex
		given []event.Event
	)
	v2 := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		mu.Lock()
		given = append(given, ev)
		mu.Unlock()
		var p stepV2
		if err := ev.DecodeData(&p); err != nil || ev.SchemaVersion != 2 || p.Sequence == 0 {
			return Permanent(fmt.Errorf("v2 handler given version %d payload %s", ev.SchemaVersion, ev.Data))
		}
		return nil
	}
	ups, err := NewUpcasters(WithUpcaster("test.step", 1, 2, stepV1to2))
	if err != nil {
		t.Fatal(err)
	}
	if vs, ok := ups.Declared("test.step"); !ok || len(vs) != 1 || vs[0] != 2 {
		t.Fatalf("Declared = %v %v; want [2]: the highest version the upcasters reach", vs, ok)
	}
	upgraded := e.standard(t, StandardConfig{Handler: v2, TrustedKeys: trusted, Upcasters: ups})
	batch, err := StandardBatch(StandardConfig{Handler: v2, TrustedKeys: trusted, Upcasters: ups, Name: "seq",
		DB: e.pool, DeadLetter: e.producer, Locker: e.locker, Fence: true})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(r *kgo.Record) *Message { return &Message{Record: r, Group: e.group, deadLetterTopic: e.dlqOf} }
	ctx := context.Background()

	// Before the upgrade: the v1 chain (no upcasters, same group and name) handles r1.
	r1 := signed("k1", 1)
	old := e.standard(t, StandardConfig{Handler: applySeq, TrustedKeys: trusted})
	if m := msg(r1); old(ctx, m) != nil || m.outcome(nil) != OutcomeHandled {
		t.Fatalf("v1 chain: outcome %v, cause %v", m.Outcome, m.DeadLetterCause)
	}

	// After it: a new signed v1 record is verified, upcast and handled at v2, on both
	// paths; r1 again is a duplicate.
	m := msg(signed("k2", 2))
	if err := upgraded(ctx, m); err != nil || m.outcome(nil) != OutcomeHandled {
		t.Fatalf("signed v1: %v, outcome %v, cause %v", err, m.Outcome, m.DeadLetterCause)
	}
	if m.Event.SchemaVersion != 2 || m.upcastFrom != 1 {
		t.Errorf("message after handling: version %d, upcast from %d", m.Event.SchemaVersion, m.upcastFrom)
	}
	again := msg(cloneRecord(r1))
	if err := upgraded(ctx, again); err != nil || again.Outcome != OutcomeDuplicate {
		t.Errorf("v1 record handled before the upgrade: %v, outcome %v, cause %v; want a duplicate",
			err, again.Outcome, again.DeadLetterCause)
	}
	ms := []*Message{msg(signed("k3", 3)), msg(signed("k4", 4)), msg(cloneRecord(r1))}
	if err := batch(ctx, ms); err != nil {
		t.Fatalf("batch: %v", err)
	}
	if ms[0].outcome(nil) != OutcomeHandled || ms[1].outcome(nil) != OutcomeHandled || ms[2].Outcome != OutcomeDuplicate {
		t.Errorf("batch outcomes %v %v %v; want handled, handled, duplicate", ms[0].Outcome, ms[1].Outcome, ms[2].Outcome)
	}
	mu.Lock()
	if len(given) != 3 {
		t.Errorf("the v2 handler ran %d times, want 3 (k2, k3, k4)", len(given))
	}
	mu.Unlock()

	// Tampered: the signature covers the v1 payload as sent.
	tampered := signed("k5", 5)
	tampered.Value = []byte(`{"seq":6}`)
	tm := msg(tampered)
	if err := upgraded(ctx, tm); err != nil || Reason(tm.DeadLetterCause) != ReasonBadSignature {
		t.Errorf("tampered: %v, cause %v; want dead-lettered as bad_signature", err, tm.DeadLetterCause)
	}
	if err := batch(ctx, []*Message{msg(tampered)}); !errors.Is(err, ErrBadSignature) {
		t.Errorf("batch, tampered: %v; want ErrBadSignature", err)
	}
}

// TestUpcasterOptions: every invalid registration is refused with ErrInvalidConfig, by
// the option that carries it.
func TestUpcasterOptions(t *testing.T) {
	id := func(d json.RawMessage) (json.RawMessage, error) { return d, nil }
	for name, opts := range map[string][]UpcasterOption{
		"empty type":       {WithUpcaster("", 1, 2, id)},
		"nil upcaster":     {WithUpcaster("a", 1, 2, nil)},
		"version 0":        {WithUpcaster("a", 0, 2, id)},
		"backwards":        {WithUpcaster("a", 2, 1, id)},
		"same version":     {WithUpcaster("a", 2, 2, id)},
		"two from v1":      {WithUpcaster("a", 1, 2, id), WithUpcaster("a", 1, 3, id)},
		"no version":       {WithDeclaredVersions("a")},
		"declared 0":       {WithDeclaredVersions("a", 0, 1)},
		"declared no type": {WithDeclaredVersions("", 1)},
		"nil option":       {nil},
	} {
		if _, err := NewUpcasters(opts...); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	u, err := NewUpcasters(WithUpcaster("a", 1, 3, id), WithUpcaster("a", 3, 4, id), WithDeclaredVersions("a", 3, 4, 3))
	if err != nil {
		t.Fatal(err)
	}
	if vs, _ := u.Declared("a"); len(vs) != 2 || vs[0] != 3 || vs[1] != 4 {
		t.Errorf("Declared(a) = %v, want [3 4]", vs)
	}
	if _, ok := u.Declared("b"); ok {
		t.Error("Declared(b): a type without upcasters or declaration has no versions")
	}
	// v1 stops at v3, the first declared version on its path; v2 has no path.
	for _, c := range []struct{ from, want int }{{1, 3}, {3, 3}, {4, 4}} {
		m := &Message{Event: event.Event{Type: "a", SchemaVersion: c.from, Data: json.RawMessage(`{}`)}, Decoded: true}
		if err := u.apply(m); err != nil || m.Event.SchemaVersion != c.want {
			t.Errorf("v%d: %v, version %d, want %d", c.from, err, m.Event.SchemaVersion, c.want)
		}
	}
	m := &Message{Event: event.Event{Type: "a", SchemaVersion: 2, Data: json.RawMessage(`{}`)}, Decoded: true}
	if err := u.apply(m); !errors.Is(err, ErrUnsupportedVersion) || Retryable(err) {
		t.Errorf("v2: %v (retryable %v), want non-retryable ErrUnsupportedVersion", err, Retryable(err))
	}
}
