package app

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/contract"
)

// upcast is one registration of [Upcast]: the raw step for the consumer, and its
// accepts declaration (the payload type it reads) once the type's topic is known.
type upcast struct {
	typ      string
	from, to int
	step     consumer.UpcasterOption
	declare  func(service, topic string) (contract.Declaration, error)
}

// Upcast registers fn to bring the payload of eventType from schema version from (a
// From) to version to (a To) for the handlers of [On]: an event of another version than
// the service registered a handler of is upcast, through a chain of upcasters (1 → 2 →
// 3), before the lock and the transaction, on the one-record path, in batch mode and
// when a dead letter is replayed. The signature is verified and the idempotency claim
// hashed on the event as received. With handlers of v1 and v2 and an upcaster 1 → 2, a
// v1 event is handled at v1.
//
// The payload is decoded as contract.Decode does (From's schema, then JSON): a payload
// outside From's schema dead-letters the event as "malformed", an error of fn as
// "upcast_failed", and a version with no path to a registered handler as
// "unsupported_version". Every version
// with a path to a handler is declared in the service's contracts with the role
// contract.Accepts and From's schema, so the breaking-change gate checks what producers
// of that version write against it, and the retirement report lists the service as
// still reading it (docs/contracts.md).
//
// Upcast panics on an empty type, versions not 1 <= from < to, a nil fn, a second
// upcaster from the same (type, version), or after Run started: programming errors,
// as with [On].
func Upcast[From, To any](a *App, eventType string, from, to int, fn func(From) (To, error)) {
	if a.state.Load() != stateNew || a.ran.Load() {
		panic("app: Upcast after Run")
	}
	if fn == nil {
		panic(fmt.Sprintf("app: Upcast(%q, %d, %d): nil upcaster", eventType, from, to))
	}
	schema, err := contract.SchemaOf[From]()
	if err != nil {
		panic(fmt.Sprintf("app: Upcast(%q, %d, %d): %v", eventType, from, to, err))
	}
	step := consumer.WithUpcaster(eventType, from, to, func(data json.RawMessage) (json.RawMessage, error) {
		if err := schema.Validate(data); err != nil {
			return nil, err
		}
		var in From
		if err := json.Unmarshal(data, &in); err != nil {
			return nil, err
		}
		out, err := fn(in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	})
	declare := func(service, topic string) (contract.Declaration, error) {
		return contract.Declare[From](service, contract.Accepts, topic, eventType, from)
	}
	ups := append(a.kit.upcasts, upcast{typ: eventType, from: from, to: to, step: step, declare: declare})
	if _, err := consumer.NewUpcasters(upcastSteps(ups)...); err != nil { // with the earlier ones: a second path is an error too
		panic(fmt.Sprintf("app: Upcast: %v", err))
	}
	a.kit.upcasts = ups
}

func upcastSteps(ups []upcast) []consumer.UpcasterOption {
	out := make([]consumer.UpcasterOption, 0, len(ups))
	for _, u := range ups {
		out = append(out, u.step)
	}
	return out
}

// accepted returns the accepts declarations of the kit's upcasters: each version with
// a path to a version registered with On, and no handler of its own.
func (a *App) accepted() ([]contract.Declaration, error) {
	var out []contract.Declaration
	for _, u := range a.kit.upcasts {
		handlers := a.kit.versions[u.typ]
		if handlers[u.from] != nil || !a.reaches(u.typ, u.to) {
			continue
		}
		d, err := u.declare(a.Config.Service, a.kit.on[u.typ])
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// reaches reports whether version v of typ has a handler or a chain of upcasters to one.
func (a *App) reaches(typ string, v int) bool {
	for {
		if a.kit.versions[typ][v] != nil {
			return true
		}
		i := slices.IndexFunc(a.kit.upcasts, func(u upcast) bool { return u.typ == typ && u.from == v })
		if i < 0 {
			return false
		}
		v = a.kit.upcasts[i].to
	}
}

// kitUpcasters returns the upcasters of the kit's consumer group, or nil without any.
// Every type registered with On declares the versions registered for it
// (consumer.WithDeclaredVersions), so an event is upcast only to a version the service
// has a handler of, and left as it is at one it has.
func (a *App) kitUpcasters() (*consumer.Upcasters, error) {
	if len(a.kit.upcasts) == 0 {
		return nil, nil
	}
	opts := upcastSteps(a.kit.upcasts)
	for _, typ := range slices.Sorted(maps.Keys(a.kit.versions)) {
		opts = append(opts, consumer.WithDeclaredVersions(typ, slices.Sorted(maps.Keys(a.kit.versions[typ]))...))
	}
	return consumer.NewUpcasters(opts...)
}
