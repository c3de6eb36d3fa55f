package consumer

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/lock"
)

// Message is one Kafka record travelling through a middleware chain. The runtime creates
// it with Record and Group set; middlewares fill in the rest as the record moves inward.
// A Message belongs to one partition worker and is never shared between goroutines.
type Message struct {
	// Record is the record as fetched. Middlewares must not modify it.
	Record *kgo.Record
	// Group is the consumer group the record was consumed in.
	Group string
	// Event is the decoded envelope; valid once Decoded is true (see Decode).
	Event event.Event
	// Decoded reports whether Event has been set.
	Decoded bool
	// Attempt is the 1-based number of the current attempt, maintained by Retry. It is 0
	// when no Retry middleware is in the chain.
	Attempt int
	// DeadLetterCause is the error that made DeadLetter dead-letter the record.
	DeadLetterCause error
	// Outcome says how handling ended when the handler returned nil; inner middlewares
	// set it (see the Outcome constants) and outer ones (Metrics, Logging) report it.
	Outcome Outcome

	// lease is the per-entity lease Lock holds while the inner handlers run; Idempotent
	// checks its fencing token. Lock sets and clears it on the goroutine that handles the
	// message, so it needs no synchronisation.
	lease *lock.Lease
	// upcastFrom is the schema version the record carried when Upcast brought Event to
	// a declared version (0: not upcast), and received its payload as received: the
	// idempotency claim hashes it (requestHash).
	upcastFrom int
	received   json.RawMessage
	// deadLetterTopic names a source topic's dead-letter topic; the runtime sets it from
	// WithDeadLetterTopics. nil: DeadLetterTopic(source).
	deadLetterTopic func(source string) string
}

// Subject returns the entity the message is about: the decoded event's subject, or the
// record key before decoding.
func (m *Message) Subject() string {
	if m.Decoded && m.Event.Subject != "" {
		return m.Event.Subject
	}
	return string(m.Record.Key)
}

// Header returns the value of the record's last header named key, or "" if absent.
func (m *Message) Header(key string) string {
	for i := len(m.Record.Headers) - 1; i >= 0; i-- {
		if m.Record.Headers[i].Key == key {
			return string(m.Record.Headers[i].Value)
		}
	}
	return ""
}

// Outcome classifies how a message whose handler returned nil was settled.
type Outcome string

// Outcomes. The zero value means OutcomeHandled.
const (
	// OutcomeHandled: the business handler ran and its transaction committed.
	OutcomeHandled Outcome = "handled"
	// OutcomeDuplicate: the idempotency record showed the event was already handled.
	OutcomeDuplicate Outcome = "duplicate"
	// OutcomeIgnored: the event's type is registered as uninteresting (Router.Ignore).
	OutcomeIgnored Outcome = "ignored"
	// OutcomeDeadLettered: handling failed for good and the record went to the
	// dead-letter topic.
	OutcomeDeadLettered Outcome = "dead_lettered"
	// OutcomeFailed: the handler returned an error (reported by Metrics and Logging; the
	// runtime then retries the record in place).
	OutcomeFailed Outcome = "failed"
)

func (m *Message) outcome(err error) Outcome {
	switch {
	case err != nil:
		return OutcomeFailed
	case m.Outcome == "":
		return OutcomeHandled
	default:
		return m.Outcome
	}
}

// Handler handles one message. Returning nil means the record is settled and its offset
// may be committed; returning an error means it is not (the runtime retries it in place).
type Handler func(ctx context.Context, m *Message) error

// Middleware wraps a Handler with cross-cutting behaviour.
type Middleware func(Handler) Handler

// wrap returns h wrapped in mws, the first middleware outermost: wrap(h, a, b) handles a
// message as a(b(h)).
func wrap(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// TxHandler is a business handler: it makes its writes, and enqueues its outgoing events
// (outbox.Enqueue), in tx, the transaction opened by Idempotent. It must not commit or
// roll back tx. Its error decides the fate of the whole transaction.
type TxHandler func(ctx context.Context, tx pgx.Tx, ev event.Event) error
