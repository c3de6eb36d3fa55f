package consumer

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
)

// TestTrust: an event of a type declared with Trust is applied only from the declared
// source and topic. A forged one (another ce_source, or the right source on another
// topic) is dead-lettered with reason "untrusted" by Standard, fails StandardBatch with
// ErrUntrusted (the runtime then hands the records to Standard one by one), and changes
// nothing; types without a rule are accepted from anywhere.
func TestTrust(t *testing.T) {
	e := newChainEnv(t, 1)
	insert := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, key, seq) VALUES ($1, $2, 0)`, ev.ID, ev.Subject)
		return err
	}
	router := func() *Router {
		return NewRouter().Handle("payment.authorized", insert).Handle("test.step", insert).
			Trust("payment", e.topic, "payment.authorized")
	}
	standard := e.standard(t, StandardConfig{Router: router(), Name: "single"})
	bcfg := StandardConfig{Router: router(), Name: "batch", DB: e.pool, DeadLetter: e.producer,
		Locker: e.locker, Fence: true}
	batch, err := StandardBatch(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := func(source, topic, typ, key string) *kgo.Record {
		ev, err := event.New(source, typ, key, map[string]string{"order_id": key})
		if err != nil {
			t.Fatal(err)
		}
		r, err := event.ToRecord(topic, ev)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ctx := context.Background()
	msg := func(r *kgo.Record) *Message { return &Message{Record: r, Group: e.group, deadLetterTopic: e.dlqOf} }

	evil := rec("evil", e.topic, "payment.authorized", "o-evil")
	wrongTopic := rec("payment", "stock.elsewhere", "payment.authorized", "o-topic")
	for _, r := range []*kgo.Record{evil, wrongTopic} {
		m := msg(r)
		if err := standard(ctx, m); err != nil {
			t.Fatalf("Standard: %v", err)
		}
		if m.Outcome != OutcomeDeadLettered || !errors.Is(m.DeadLetterCause, ErrUntrusted) || Reason(m.DeadLetterCause) != ReasonUntrusted {
			t.Errorf("%s: outcome %v, cause %v; want dead-lettered as untrusted", r.Key, m.Outcome, m.DeadLetterCause)
		}
		if err := batch(ctx, []*Message{msg(rec("payment", e.topic, "payment.authorized", "o-ok")), msg(r)}); !errors.Is(err, ErrUntrusted) {
			t.Errorf("StandardBatch: %v, want ErrUntrusted", err)
		}
	}
	dl := readTopic(t, e.brokers, e.dlq, 2)
	for _, r := range dl {
		var reason, msg string
		for _, h := range r.Headers {
			switch h.Key {
			case HeaderDLQReason:
				reason = string(h.Value)
			case HeaderDLQError:
				msg = string(h.Value)
			}
		}
		if reason != ReasonUntrusted || !strings.Contains(msg, `accepted: source "payment" on `+e.topic) {
			t.Errorf("dead letter %s: reason %q, error %q", r.Key, reason, msg)
		}
	}
	if n := count(t, e.pool, `SELECT count(*) FROM effects`); n != 0 {
		t.Fatalf("%d effects from forged events, want 0", n)
	}

	// The trusted event, and a type without rules from any source, are applied.
	for _, r := range []*kgo.Record{rec("payment", e.topic, "payment.authorized", "o-1"), rec("anyone", e.topic, "test.step", "o-2")} {
		m := msg(r)
		if err := standard(ctx, m); err != nil || m.outcome(nil) != OutcomeHandled {
			t.Fatalf("%s: %v, outcome %v", r.Key, err, m.Outcome)
		}
	}
	if n := count(t, e.pool, `SELECT count(*) FROM effects`); n != 2 {
		t.Errorf("%d effects, want 2", n)
	}

	// A type may be trusted from several sources; the error lists them all.
	r := NewRouter().Handle("x", insert).Trust("a", "", "x").Trust("b", "t1", "x")
	for _, tc := range []struct {
		source, topic string
		ok            bool
	}{{"a", "t2", true}, {"b", "t1", true}, {"b", "t2", false}, {"c", "t1", false}} {
		m := &Message{Record: &kgo.Record{Topic: tc.topic}, Event: event.Event{Type: "x", Source: tc.source}, Decoded: true}
		if _, err := r.filter(m); (err == nil) != tc.ok {
			t.Errorf("source %s on %s: %v", tc.source, tc.topic, err)
		}
	}
	m := &Message{Record: &kgo.Record{Topic: "t2"}, Event: event.Event{Type: "x", Source: "b"}, Decoded: true}
	if _, err := r.filter(m); !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), `source "a" on any topic; source "b" on t1`) {
		t.Errorf("b on t2: %v", err)
	}
}

// TestSubjects: a subject the Subjects rule rejects fails the filter as malformed, so no
// lock or fence key is made from it.
func TestSubjects(t *testing.T) {
	r := NewRouter().Handle("x", func(context.Context, pgx.Tx, event.Event) error { return nil }).
		Subjects(func(s string) error {
			if strings.Contains(s, "/") {
				return errors.New("no slashes")
			}
			return nil
		})
	for s, ok := range map[string]bool{"o-1": true, "../../etc": false} {
		m := &Message{Record: &kgo.Record{Topic: "t"}, Event: event.Event{Type: "x", Subject: s}, Decoded: true}
		_, err := r.filter(m)
		if (err == nil) != ok || (!ok && (!errors.Is(err, event.ErrMalformed) || Reason(err) != ReasonMalformed)) {
			t.Errorf("subject %q: %v", s, err)
		}
	}
}
