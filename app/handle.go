package app

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/outbox"
)

// ErrUndeclaredTopic is returned by [App.Publish] for a topic that was neither declared
// with [WithTopics] nor consumed: Run would not have created it.
var ErrUndeclaredTopic = errors.New("app: topic not declared (app.WithTopics)")

// kit holds the registrations of Handle until Run builds their consumer group.
type kit struct {
	topics []string                               // consumed, in registration order
	on     map[string]string                      // event type → its topic
	lockOn map[string]func(ev event.Event) string // event type → the entity it locks
}

func newKit() kit {
	return kit{on: map[string]string{}, lockOn: map[string]func(event.Event) string{}}
}

// HandlerOption configures one handler of [App.Handle].
type HandlerOption func(*handlerOptions)

type handlerOptions struct {
	lockOn func(ev event.Event) string
}

// LockOn makes the handler lock the entity entity(ev) names instead of the event's
// subject (the record key), e.g. the customer of an order event when handlers of several
// topics change the same customer's balance. The lock serialises work on the entity
// across partitions and instances, and its fencing token guards the transaction; the
// Postgres transaction stays the correctness guard. An empty entity runs the handler
// without a lock. Default: the subject.
func LockOn(entity func(ev event.Event) string) HandlerOption {
	return func(o *handlerOptions) { o.lockOn = entity }
}

// Handle registers h for events of type eventType on topic, in the service's consumer
// group (WithGroup; default the service name), which consumes every topic a Handle names.
// Run starts the group with the standard chain (consumer.Standard, and
// consumer.StandardBatch when Config.ConsumerBatch > 1): tracing, correlation, metrics
// and logs, dead letters, retries with backoff, a per-entity Redis lock with fencing,
// and h in a Postgres transaction that also claims the event's id, so that a redelivered
// event is skipped. h runs in a context carrying the event (see [WithHandled]): publish
// the next event with [App.Publish] in the same tx, and it continues the event's saga.
//
// h's error decides what happens to the event: nil commits; an error matching
// event.ErrMalformed or wrapped with consumer.Permanent dead-letters it at once; any
// other error rolls back and retries (consumer.RetryConfig), then dead-letters it; an
// outage (database or Redis unreachable) retries without limit and never dead-letters.
//
// Events of types no Handle registered for their topic are settled as ignored (see
// [WithDeadLetterUnknownTypes]). Handle panics if eventType is already registered (an
// event type has one handler per service), if topic or eventType is empty or h nil, or
// after Run started: these are programming errors, as with http.ServeMux.
func (a *App) Handle(topic, eventType string, h consumer.TxHandler, opts ...HandlerOption) {
	if a.state.Load() != stateNew || a.ran.Load() {
		panic("app: Handle after Run")
	}
	if topic == "" || eventType == "" || h == nil {
		panic(fmt.Sprintf("app: Handle(%q, %q): empty topic or event type, or nil handler", topic, eventType))
	}
	if t, ok := a.kit.on[eventType]; ok {
		panic(fmt.Sprintf("app: event type %q registered twice (on %s and %s)", eventType, t, topic))
	}
	var o handlerOptions
	for _, opt := range opts {
		opt(&o)
	}
	a.Router.HandleOn(topic, eventType, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		return h(WithHandled(ctx, ev), tx, ev)
	})
	a.kit.on[eventType] = topic
	if o.lockOn != nil {
		a.kit.lockOn[eventType] = o.lockOn
	}
	if !slices.Contains(a.kit.topics, topic) {
		a.kit.topics = append(a.kit.topics, topic)
	}
}

// Publish stores ev in the outbox in tx, to be published to topic (key = ev.Subject)
// after tx commits: the event exists if and only if the handler's writes do. The relay
// publishes it at least once, in order per key, with the traceparent of ctx. topic must
// be declared with [WithTopics] or consumed by [App.Handle]; otherwise Publish returns an
// error matching [ErrUndeclaredTopic].
//
// In a handler of [App.Handle], ev continues the saga of the event being handled (see
// [WithHandled]): an ev without a causation id gets that event's id as its causation id
// and, if its correlation id is empty or event.New's default (the subject), that event's
// correlation id. An ev whose causation id is set (ev.CausedBy) is published as it is.
func (a *App) Publish(ctx context.Context, tx pgx.Tx, topic string, ev event.Event) error {
	if !slices.Contains(a.opts.topics, topic) && !slices.Contains(a.kit.topics, topic) {
		return fmt.Errorf("%w: %q", ErrUndeclaredTopic, topic)
	}
	return OutboxPublisher{Outbox: a.Outbox}.Publish(ctx, tx, topic, ev)
}

// Publisher stores an event in the transactional outbox in a handler's transaction.
// [*App] is the kit's; a handler that takes a Publisher instead of the App can be tested
// alone with an [OutboxPublisher].
type Publisher interface {
	Publish(ctx context.Context, tx pgx.Tx, topic string, ev event.Event) error
}

// OutboxPublisher is a [Publisher] over an outbox, without the App: it publishes as
// [App.Publish] does (the saga's ids default to those of the event being handled)
// without checking the topic. It serves a handler's unit test (apptest.Handle) and a
// service that runs its consumers without the kit.
type OutboxPublisher struct {
	Outbox *outbox.Outbox
}

// Publish enqueues ev for topic in tx (see [App.Publish]).
func (p OutboxPublisher) Publish(ctx context.Context, tx pgx.Tx, topic string, ev event.Event) error {
	if cause, ok := Handled(ctx); ok && ev.CausationID == "" {
		ev.CausationID = cause.ID
		if ev.CorrelationID == "" || ev.CorrelationID == ev.Subject {
			ev.CorrelationID = cause.CorrelationID
		}
	}
	return p.Outbox.Enqueue(ctx, tx, topic, ev)
}

// handledKey is the context key of the event being handled.
type handledKey struct{}

// WithHandled returns ctx carrying ev as the event being handled, so that a [Publisher]
// in ctx continues ev's saga. The kit runs every handler of [App.Handle] in such a
// context; a handler run by other means (a consumer of its own, a unit test) gets the
// same defaults with it. The handlers of a group added with [App.Consume] are not
// wrapped: they call WithHandled themselves to get these defaults.
func WithHandled(ctx context.Context, ev event.Event) context.Context {
	return context.WithValue(ctx, handledKey{}, ev)
}

// Handled returns the event being handled in ctx (see [WithHandled]).
func Handled(ctx context.Context) (event.Event, bool) {
	ev, ok := ctx.Value(handledKey{}).(event.Event)
	return ev, ok
}

// startKit registers the consumer group of Handle's registrations, if any (Run).
func (a *App) startKit() error {
	if len(a.kit.topics) == 0 {
		return nil
	}
	lockOn := a.kit.lockOn
	ups, err := a.kitUpcasters()
	if err != nil {
		return err
	}
	spec := ConsumerSpec{
		Group:   a.opts.group,
		Topics:  a.kit.topics,
		Router:  a.Router,
		Name:    a.opts.handlerName,
		Options: a.opts.consumerOps,
		Configure: func(sc *consumer.StandardConfig) {
			sc.Upcasters = ups
			if len(lockOn) > 0 {
				sc.LockEntity = func(m *consumer.Message) string {
					if f := lockOn[m.Event.Type]; f != nil {
						return f(m.Event)
					}
					return m.Subject()
				}
			}
			for _, f := range a.opts.chain {
				f(sc)
			}
		},
	}
	if a.opts.retry != nil {
		spec.Retry = *a.opts.retry
	}
	return a.consume(spec)
}

// HandlerGroup returns the consumer group of the handlers registered with Handle and the
// topics it consumes (none before the first Handle), e.g. to wait in a test until the
// group has caught up.
func (a *App) HandlerGroup() (group string, topics []string) {
	return a.opts.group, slices.Clone(a.kit.topics)
}
