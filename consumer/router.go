package consumer

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/event"
)

// Router dispatches events to business handlers by event type. Types registered with
// Ignore are acknowledged without work; any other unregistered type fails with
// ErrUnknownType, which is non-retryable (the event is dead-lettered). Register every
// route before the consumer runs; a Router is then safe for concurrent use.
type Router struct {
	routes  map[string]TxHandler
	ignore  map[string]bool
	topic   map[string]string          // see HandleOn: the one topic a type is routed from
	others  bool                       // see IgnoreUnknown
	trust   map[string][]trustRule     // see Trust (trust.go)
	subject func(subject string) error // see Subjects (trust.go)
	keys    map[string]*event.KeySet   // see TrustKeys (signature.go)
}

// NewRouter returns an empty Router.
func NewRouter() *Router {
	return &Router{routes: make(map[string]TxHandler), ignore: make(map[string]bool)}
}

// Handle routes events of type typ to h and returns r. It panics if typ is already
// routed or ignored, or h is nil: both are programming errors.
func (r *Router) Handle(typ string, h TxHandler) *Router {
	if h == nil {
		panic(fmt.Sprintf("consumer: nil handler for %q", typ))
	}
	r.mustBeNew(typ)
	r.routes[typ] = h
	return r
}

// HandleOn is Handle for events of type typ consumed from topic only, and returns r: on
// any other topic the type counts as not routed (ignored under IgnoreUnknown, unknown
// otherwise). Like Trust, the topic is checked by Filter, and so by Standard and
// StandardBatch; Route alone does not see it. It panics as Handle does.
func (r *Router) HandleOn(topic, typ string, h TxHandler) *Router {
	r.Handle(typ, h)
	if r.topic == nil {
		r.topic = make(map[string]string)
	}
	r.topic[typ] = topic
	return r
}

// IgnoreUnknown makes r settle events of every type that is not routed with
// OutcomeIgnored, as if declared with Ignore, instead of failing them with
// ErrUnknownType (dead-lettered); it returns r. For a consumer that reads a topic shared
// with event types that are none of its business.
func (r *Router) IgnoreUnknown() *Router {
	r.others = true
	return r
}

// Ignore declares event types this consumer knowingly does not handle, and returns r.
// Their records are settled with OutcomeIgnored, before any lock or transaction.
func (r *Router) Ignore(types ...string) *Router {
	for _, t := range types {
		r.mustBeNew(t)
		r.ignore[t] = true
	}
	return r
}

func (r *Router) mustBeNew(typ string) {
	if _, ok := r.routes[typ]; ok || r.ignore[typ] {
		panic(fmt.Sprintf("consumer: event type %q registered twice", typ))
	}
}

// Types returns the routed event types, sorted.
func (r *Router) Types() []string {
	return slices.Sorted(maps.Keys(r.routes))
}

// Filter is the Middleware half of the router: it fails events that break a Trust rule
// with ErrUntrusted and events without a valid signature of a source declared with
// TrustKeys with ErrBadSignature, settles ignored types with OutcomeIgnored and fails unknown types
// with ErrUnknownType, before the handlers it
// wraps (lock, transaction) run. It needs a decoded message (see Decode).
func (r *Router) Filter() Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			if ok, err := r.filter(m); !ok {
				return err
			}
			return next(ctx, m)
		}
	}
}

// filter reports whether m's event type is routed. An event that breaks a Trust rule
// fails with ErrUntrusted; an ignored type is settled with OutcomeIgnored (nil error)
// and any other unrouted type fails with unknownType.
// Filter and StandardBatch both call it.
func (r *Router) filter(m *Message) (bool, error) {
	typ := m.Event.Type
	if err := r.trusted(m); err != nil {
		return false, err
	}
	if err := r.signed(m); err != nil {
		return false, err
	}
	if err := r.validSubject(m); err != nil {
		return false, err
	}
	switch {
	case r.routes[typ] != nil && (r.topic[typ] == "" || r.topic[typ] == m.Topic()):
		return true, nil
	case r.ignore[typ] || r.others:
		m.Outcome = OutcomeIgnored
		return false, nil
	default:
		return false, r.unknownType(typ)
	}
}

// unknownType is the error for an event type that is neither routed nor ignored.
func (r *Router) unknownType(typ string) error {
	return fmt.Errorf("%w: %q (routed: %v)", ErrUnknownType, typ, r.Types())
}

// Route is the TxHandler half of the router: it calls the handler registered for the
// event's type. An ignored type does nothing; an unknown type fails with ErrUnknownType.
func (r *Router) Route(ctx context.Context, tx pgx.Tx, ev event.Event) error {
	if h := r.routes[ev.Type]; h != nil {
		return h(ctx, tx, ev)
	}
	if r.ignore[ev.Type] {
		return nil
	}
	return r.unknownType(ev.Type)
}
