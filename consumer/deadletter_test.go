package consumer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/internal/testenv"
)

func TestDeadLetter(t *testing.T) {
	brokers := testenv.Kafka(t)
	src := testenv.Topic(t, brokers, 1)
	dlq := testenv.Topic(t, brokers, 1)
	producer := newProducer(t, brokers)
	produce(t, producer, eventRecord(t, src, "test.step", "k", seqPayload{Seq: 1}))
	orig := readTopic(t, brokers, src, 1)[0]

	mw := DeadLetter(producer)
	cause := fmt.Errorf("validate: %w", Permanent(errors.New("amount must be positive")))
	m := &Message{Record: orig, Group: "payments", Attempt: 1, deadLetterTopic: func(s string) string {
		if s != src {
			t.Errorf("dead-letter topic of %q asked", s)
		}
		return dlq
	}}
	if err := mw(func(context.Context, *Message) error { return cause })(context.Background(), m); err != nil {
		t.Fatalf("DeadLetter returned %v after dead-lettering", err)
	}
	if m.Outcome != OutcomeDeadLettered || m.DeadLetterCause != cause {
		t.Errorf("outcome %q cause %v", m.Outcome, m.DeadLetterCause)
	}
	d := readTopic(t, brokers, dlq, 1)[0]
	wantHeaders := map[string]string{
		HeaderDLQReason:    ReasonPermanent,
		HeaderDLQError:     cause.Error(),
		HeaderDLQAttempts:  "1",
		HeaderDLQTopic:     src,
		HeaderDLQPartition: "0",
		HeaderDLQOffset:    "0",
		HeaderDLQGroup:     "payments",
		HeaderDLQTimestamp: orig.Timestamp.UTC().Format(time.RFC3339Nano),
		event.HeaderID:     header(orig, event.HeaderID),
		event.HeaderType:   "test.step",
	}
	for k, v := range wantHeaders {
		if got := header(d, k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, header(d, HeaderDLQFailedAt)); err != nil {
		t.Errorf("failed-at header: %v", err)
	}
	if string(d.Key) != string(orig.Key) || string(d.Value) != string(orig.Value) {
		t.Errorf("key/value %s/%s, want %s/%s", d.Key, d.Value, orig.Key, orig.Value)
	}

	// Success and abandoned records produce nothing.
	if err := mw(func(context.Context, *Message) error { return nil })(context.Background(), &Message{Record: orig}); err != nil {
		t.Fatal(err)
	}
	stopped := fmt.Errorf("%w: transient", errStopping)
	if err := mw(func(context.Context, *Message) error { return stopped })(context.Background(), &Message{Record: orig}); !errors.Is(err, errStopping) {
		t.Fatalf("abandoned record: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := mw(func(context.Context, *Message) error { return errors.New("x") })(ctx, &Message{Record: orig}); err == nil {
		t.Fatal("a record failing after cancellation was dead-lettered")
	}
	if n := endOffsets(t, brokers, dlq)[0]; n != 1 {
		t.Errorf("dead-letter topic holds %d records, want 1", n)
	}
}

// When the dead-letter produce fails, the record is not settled: the error matches
// ErrDeadLetter and still carries the handling error.
func TestDeadLetterProduceFailure(t *testing.T) {
	brokers := testenv.Kafka(t)
	closed, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	cause := errors.New("boom")
	m := &Message{Record: &kgo.Record{Topic: "t", Value: []byte("v")}}
	err = DeadLetter(closed)(func(context.Context, *Message) error { return cause })(context.Background(), m)
	if !errors.Is(err, ErrDeadLetter) || !errors.Is(err, cause) || !errors.Is(err, kgo.ErrClientClosed) {
		t.Fatalf("error %v", err)
	}
	if m.Outcome == OutcomeDeadLettered {
		t.Error("outcome says dead-lettered")
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w after 5 attempts: %w", ErrRetriesExhausted, errors.New("x")), ReasonRetriesExhausted},
		{fmt.Errorf("d: %w", event.ErrMalformed), ReasonMalformed},
		{ErrUnknownType, ReasonUnknownType},
		{idempotency.ErrKeyReused, ReasonKeyReused},
		{&panicError{value: 1}, ReasonPanic},
		{Permanent(errors.New("x")), ReasonPermanent},
		{errors.New("x"), ReasonFailed},
	}
	for _, tt := range tests {
		if got := Reason(tt.err); got != tt.want {
			t.Errorf("Reason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// An invalid dead-letter option is an error wrapping ErrInvalidConfig, never the default.
func TestDeadLetterOptionsAreValidated(t *testing.T) {
	for name, opt := range map[string]deadLetterOption{
		"nil archive":      deadLetterArchiveTo(nil),
		"zero value bytes": deadLetterValueBytes(0),
		"negative bytes":   deadLetterValueBytes(-1),
		"nil logger":       deadLetterLogger(nil),
	} {
		if mw, err := newDeadLetter(nil, opt); !errors.Is(err, ErrInvalidConfig) || mw != nil {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}
