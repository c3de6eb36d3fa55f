package app

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/app/internal/handled"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/outbox"
)

// kit holds the registrations of On and Produces until Run builds their consumer group.
type kit struct {
	topics   []string                                                             // consumed, in registration order
	on       map[string]string                                                    // event type → its topic
	versions map[string]map[int]consumer.TxHandler                                // event type → version → handler
	lockOn   map[string]func(ctx context.Context, ev event.Event) (string, error) // event type → the entity it locks
	produces map[produced]bool                                                    // see Produces
	decls    []contract.Declaration                                               // what On and Produces declared
	upcasts  []upcast                                                             // Upcast's registrations
}

// produced identifies what Produces declares: an event type and version on a topic.
type produced struct {
	topic, typ string
	version    int
}

func newKit() kit {
	return kit{on: map[string]string{}, versions: map[string]map[int]consumer.TxHandler{},
		lockOn: map[string]func(context.Context, event.Event) (string, error){}, produces: map[produced]bool{}}
}

// HandlerOption configures one handler of [On]. An invalid value is an error wrapping
// [ErrInvalidConfig], and On panics with it.
type HandlerOption func(*handlerOptions) error

type handlerOptions struct {
	lockOn func(ctx context.Context, ev event.Event) (string, error)
}

// LockOn makes the handler lock the entity entity(ctx, ev) names instead of the event's
// subject (the record key), e.g. the customer of an order event when handlers of several
// topics change the same customer's balance. The lock serialises work on the entity
// across partitions and instances, and its fencing token guards the transaction; the
// Postgres transaction stays the correctness guard. An empty entity runs the handler
// without a lock. The lock is per event type: every version of the type takes the
// entity of the last On that set it.
//
// The lock is taken before the handler's transaction opens (in batch mode, the locks of
// all the batch's records before the batch's one transaction), so entity runs outside any
// transaction: ctx is the record's (its span, its deadline, the worker's stop), and a
// lookup it needs (the customer of an order) reads through a pool with ctx, say
// [App.Pool]. Its error fails the record as a handler's does: retried, then
// dead-lettered; wrap it with consumer.Permanent (a malformed payload) to dead-letter at
// once. Default: the subject.
func LockOn(entity func(ctx context.Context, ev event.Event) (string, error)) HandlerOption {
	return func(o *handlerOptions) error {
		if entity == nil {
			return invalid("LockOn: nil function")
		}
		o.lockOn = entity
		return nil
	}
}

// On registers h for events of type eventType at payload schema version version
// (ce_dataschemaversion) on topic, and declares that the service reads their payload as
// a T: the consumer side of the event's contract (see [App.Contracts]). It is the one
// way to register an event handler on the kit.
//
// Before h runs, the payload is decoded with contract.Decode: validated against T's
// JSON Schema (contract.SchemaFor: every field without omitempty is required, types,
// bounds, enums; unknown fields are ignored), unmarshalled, and, if T has a Subject
// method, checked to be about the event's subject. A payload that fails is malformed:
// dead-lettered at once, h never sees it.
//
// Handlers are in the service's consumer group (WithGroup; default the service name),
// which consumes every topic an On names. Run starts the group with the standard chain
// (consumer.Standard, and consumer.StandardBatch when Config.ConsumerBatch > 1):
// tracing, correlation, metrics and logs, dead letters, retries with backoff, a
// per-entity Redis lock with fencing, and h in a Postgres transaction that also claims
// the event's id, so that a redelivered event is skipped. h runs in a context carrying
// the event: publish the next event with [App.Publish] or a
// [Producer] in the same tx, and it continues the event's saga.
//
// h's error decides what happens to the event: nil commits; an error matching
// event.ErrMalformed or wrapped with consumer.Permanent dead-letters it at once; any
// other error rolls back and retries (consumer.RetryConfig), then dead-letters it; an
// outage (database or Redis unreachable) retries without limit and never dead-letters.
//
// One service may register several versions of a type (v1 and v2 of a payload while
// producers migrate); each event goes to the handler of its version, and a version
// nobody registered is dead-lettered (consumer.ErrUnknownType). Events of types no On
// registered for their topic are settled as ignored (see [WithDeadLetterUnknownTypes]).
//
// On panics if (eventType, version) is already registered, if eventType is registered
// on another topic, if topic or eventType is empty, version < 1 or h nil, if T has no
// JSON Schema (contract.SchemaFor), or after Run started: these are programming errors,
// as with http.ServeMux.
func On[T any](a *App, topic, eventType string, version int, h func(ctx context.Context, tx pgx.Tx, ev event.Event, p T) error, opts ...HandlerOption) {
	if a.state.Load() != stateNew || a.ran.Load() {
		panic("app: On after Run")
	}
	if topic == "" || eventType == "" || version < 1 || h == nil {
		panic(fmt.Sprintf("app: On(%q, %q, %d): empty topic or event type, version < 1, or nil handler", topic, eventType, version))
	}
	if t, ok := a.kit.on[eventType]; ok && t != topic {
		panic(fmt.Sprintf("app: event type %q registered on %s and %s", eventType, t, topic))
	}
	if a.kit.versions[eventType][version] != nil {
		panic(fmt.Sprintf("app: %s version %d registered twice", eventType, version))
	}
	d, err := contract.Declare[T](a.Config.Service, contract.Consumes, topic, eventType, version)
	if err != nil {
		panic(fmt.Sprintf("app: On(%q, %q, %d): %v", topic, eventType, version, err))
	}
	var o handlerOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			panic(fmt.Sprintf("app: On(%q, %q, %d): %v", topic, eventType, version, err))
		}
	}
	vs := a.kit.versions[eventType]
	if vs == nil {
		vs = map[int]consumer.TxHandler{}
		a.kit.versions[eventType] = vs
		a.Router.HandleOn(topic, eventType, dispatch(eventType, vs))
	}
	vs[version] = Decoded(h)
	a.kit.on[eventType] = topic
	a.kit.decls = append(a.kit.decls, d)
	if o.lockOn != nil {
		a.kit.lockOn[eventType] = o.lockOn
	}
	if !slices.Contains(a.kit.topics, topic) {
		a.kit.topics = append(a.kit.topics, topic)
	}
}

// dispatch routes the events of one type to the handler of their schema version.
func dispatch(eventType string, versions map[int]consumer.TxHandler) consumer.TxHandler {
	return func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		h := versions[ev.SchemaVersion]
		if h == nil {
			return fmt.Errorf("%w: %q version %d (handled: %v)", consumer.ErrUnknownType, eventType, ev.SchemaVersion,
				slices.Sorted(maps.Keys(versions)))
		}
		return h(ctx, tx, ev)
	}
}

// Decoded returns h as a consumer.TxHandler that decodes the payload as [On] does
// (contract.Decode) and calls h in a context carrying ev, so that what h publishes
// continues ev's saga (see [App.Publish]): for a handler's unit test (apptest.Handle)
// or a consumer built without the kit.
func Decoded[T any](h func(ctx context.Context, tx pgx.Tx, ev event.Event, p T) error) consumer.TxHandler {
	return func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		p, err := contract.Decode[T](ev)
		if err != nil {
			return err
		}
		return h(handled.With(ctx, ev), tx, ev, p)
	}
}

// Publish stores ev in the outbox in tx, to be published to topic (key = ev.Subject)
// after tx commits: the event exists if and only if the handler's writes do. The relay
// publishes it at least once, in order per key, with the traceparent of ctx. The
// service must have declared ev's type and schema version on topic with
// [App.Produces]; otherwise Publish returns an error matching [ErrUndeclared]. A
// [Producer] builds such events.
//
// In a handler of [On] (or one wrapped with [Decoded]), whose context carries the event
// being handled, ev continues that event's saga: an ev without a causation id gets that event's id as its causation id
// and, if its correlation id is empty or event.New's default (the subject), that event's
// correlation id. An ev whose causation id is set (ev.CausedBy) is published as it is.
func (a *App) Publish(ctx context.Context, tx pgx.Tx, topic string, ev event.Event) error {
	if !a.kit.produces[produced{topic, ev.Type, ev.SchemaVersion}] {
		return fmt.Errorf("%w: %s version %d on %q", ErrUndeclared, ev.Type, ev.SchemaVersion, topic)
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
	if cause, ok := handled.From(ctx); ok && ev.CausationID == "" {
		ev.CausationID = cause.ID
		if ev.CorrelationID == "" || ev.CorrelationID == ev.Subject {
			ev.CorrelationID = cause.CorrelationID
		}
	}
	return p.Outbox.Enqueue(ctx, tx, topic, ev)
}

// startKit registers the consumer group of On's registrations, if any (Run).
func (a *App) startKit() error {
	if len(a.kit.topics) == 0 {
		return nil
	}
	lockOn := a.kit.lockOn
	ups, err := a.kitUpcasters()
	if err != nil {
		return err
	}
	spec := consumerSpec{
		Group:   a.opts.group,
		Topics:  a.kit.topics,
		Router:  a.Router,
		Name:    a.opts.handlerName,
		Options: a.opts.consumerOps,
		Configure: func(sc *consumer.StandardConfig) {
			sc.Upcasters = ups
			if len(lockOn) > 0 {
				sc.LockEntity = func(ctx context.Context, m *consumer.Message) (string, error) {
					if f := lockOn[m.Event.Type]; f != nil {
						return f(ctx, m.Event)
					}
					return m.Subject(), nil
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

// HandlerGroup returns the consumer group of the handlers registered with On and the
// topics it consumes (none before the first On), e.g. to wait in a test until the
// group has caught up.
func (a *App) HandlerGroup() (group string, topics []string) {
	return a.opts.group, slices.Clone(a.kit.topics)
}
