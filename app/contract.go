package app

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/event"
)

// Producer is the producer side of an event's contract: the events of one type at one
// payload schema version, with payloads of type T, that a service publishes on one
// topic. A service declares it with [App.Produces] and builds its events with New, so
// that the type, the version (ce_dataschemaversion) and the payload's schema come from
// one place. It is a plain value: declare it once, e.g. beside the payload type.
type Producer[T any] struct {
	// Source is the producing service's name (ce_source).
	Source string
	// Topic is where the events are published.
	Topic string
	// Type is the event type (ce_type).
	Type string
	// Version is the payload schema version (ce_dataschemaversion), from 1.
	Version int
}

// New returns an event of p's type, source and version about subject with payload, as
// event.New builds it (fresh id, current time, a new saga named after the subject). The
// payload must be valid under T's schema (contract.SchemaFor): a producer only writes
// what it declares, e.g. a nil slice in a field without omitempty (JSON null) is refused.
// The error then matches event.ErrInvalidPayload.
func (p Producer[T]) New(subject string, payload T) (event.Event, error) {
	s, err := contract.SchemaOf[T]()
	if err != nil {
		return event.Event{}, err
	}
	ev, err := event.New(p.Source, p.Type, subject, payload)
	if err != nil {
		return event.Event{}, err
	}
	ev.SchemaVersion = p.Version
	if err := ev.Validate(); err != nil {
		return event.Event{}, err
	}
	if err := s.Validate(ev.Data); err != nil {
		return event.Event{}, fmt.Errorf("%s: %w", p.Type, err)
	}
	return ev, nil
}

// Publish builds the event (New) and stores it with pub in tx, to be published on
// p.Topic after tx commits (see [App.Publish]). In a handler it continues the handled
// event's saga.
func (p Producer[T]) Publish(ctx context.Context, tx pgx.Tx, pub Publisher, subject string, payload T) error {
	ev, err := p.New(subject, payload)
	if err != nil {
		return consumer.Permanent(err)
	}
	return pub.Publish(ctx, tx, p.Topic, ev)
}

// declare is the producer's declaration for service, and its schema.
func (p Producer[T]) declare(service string) (contract.Declaration, error) {
	return contract.Declare[T](service, contract.Produces, p.Topic, p.Type, p.Version)
}

// Output is a [Producer] of any payload type, as [App.Produces] takes it.
type Output interface {
	declare(service string) (contract.Declaration, error)
}

// Produces declares that the service publishes the events of each producer: the
// producer side of their contracts (see [App.Contracts]). [App.Publish] refuses an event
// whose (topic, type, version) no Produces declared, and Run creates the topics (with
// their dead-letter topics). It panics on an incomplete producer (empty topic or type,
// version < 1), a payload type without a JSON Schema, a producer declared twice, or
// after Run started: programming errors, as with [On].
func (a *App) Produces(outs ...Output) {
	if a.state.Load() != stateNew || a.ran.Load() {
		panic("app: Produces after Run")
	}
	for _, o := range outs {
		d, err := o.declare(a.Config.Service)
		if err != nil {
			panic(fmt.Sprintf("app: Produces: %v", err))
		}
		k := produced{d.Topic, d.Type, d.Version}
		if a.kit.produces[k] {
			panic(fmt.Sprintf("app: Produces: %s version %d on %s declared twice", d.Type, d.Version, d.Topic))
		}
		a.kit.produces[k] = true
		a.kit.decls = append(a.kit.decls, d)
		if !slices.Contains(a.topics, d.Topic) {
			a.topics = append(a.topics, d.Topic, consumer.DeadLetterTopic(d.Topic))
		}
	}
}

// Contracts returns what the service declared with [On], [Upcast] and [App.Produces]:
// per event type and version, the payload schema it reads, accepts through an upcaster
// or writes. It panics if an upcaster's payload type has no JSON Schema, which Upcast
// already refused.
func (a *App) Contracts() []contract.Declaration {
	acc, err := a.accepted()
	if err != nil {
		panic(fmt.Sprintf("app: Contracts: %v", err))
	}
	return slices.Concat(a.kit.decls, acc)
}

// Declarations returns what register declares for service ([On], [Upcast], [App.Produces])
// without connecting to anything: register runs on an App that only records (its
// connections are nil; Run and Publish must not be called on it). A service whose
// registration is one function gets its contracts, for a catalogue or a
// breaking-change check, from the same code that registers its handlers.
func Declarations(service string, register func(a *App)) []contract.Declaration {
	a := &App{Config: Config{Service: service}, Router: consumer.NewRouter(), kit: newKit()}
	register(a)
	return a.Contracts()
}
