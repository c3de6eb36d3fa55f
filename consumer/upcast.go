package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/choreo-saga/choreo/idempotency"
)

// Upcaster turns the JSON payload of one schema version of an event type into the
// payload of a later version, e.g. renames a field or fills a new one with its default.
// It must be a pure function of its input: the same payload always gives the same
// result, because a redelivered or replayed record is upcast again. It must not modify
// data. An error means the payload cannot be brought to the later version: the record
// is dead-lettered (ErrUpcast, reason "upcast_failed").
type Upcaster func(data json.RawMessage) (json.RawMessage, error)

// Upcasters are the upcasters of one consumer, registered per (event type, from
// version → to version), and the schema versions its handlers declare per event type.
// Build them with NewUpcasters and apply them with Upcast (StandardConfig.Upcasters).
// They are safe for concurrent use.
type Upcasters struct {
	steps    map[string]map[int]upcastStep // type → from version → step
	declared map[string][]int              // type → the versions its handler declares, sorted
}

// upcastStep is one registered upcaster: from the version it is keyed by to to.
type upcastStep struct {
	to int
	fn Upcaster
}

// upcastConfig collects the options of NewUpcasters.
type upcastConfig struct {
	steps    map[string]map[int]upcastStep
	declared map[string][]int
}

// UpcasterOption configures NewUpcasters.
type UpcasterOption func(*upcastConfig) error

// WithUpcaster registers fn to bring the payload of typ from version from to version
// to (to > from >= 1). Upcasters chain: with 1 → 2 and 2 → 3 registered, a version 1
// payload goes through both to reach a handler that declares version 3. One upcaster
// leaves each (type, version): registering a second one from the same version, an
// empty type, a nil fn or versions out of order is an error matching ErrInvalidConfig.
func WithUpcaster(typ string, from, to int, fn Upcaster) UpcasterOption {
	return func(c *upcastConfig) error {
		switch {
		case typ == "" || fn == nil:
			return fmt.Errorf("%w: WithUpcaster(%q, %d, %d): empty type or nil upcaster", ErrInvalidConfig, typ, from, to)
		case from < 1 || to <= from:
			return fmt.Errorf("%w: WithUpcaster(%q, %d, %d): want 1 <= from < to", ErrInvalidConfig, typ, from, to)
		}
		if s, ok := c.steps[typ][from]; ok {
			return fmt.Errorf("%w: WithUpcaster(%q, %d, %d): %q already has an upcaster from version %d (to %d)",
				ErrInvalidConfig, typ, from, to, typ, from, s.to)
		}
		if c.steps[typ] == nil {
			c.steps[typ] = make(map[int]upcastStep)
		}
		c.steps[typ][from] = upcastStep{to: to, fn: fn}
		return nil
	}
}

// WithDeclaredVersions declares the schema versions of typ its handler accepts; a
// record of another version is upcast to the first of them its upcasters reach. Without
// it, the handler of a type with upcasters declares the highest version they reach,
// and a type with neither is handled at whatever version it carries. Calling it again
// for a type replaces its versions. An empty type, no version or a version below 1 is
// an error matching ErrInvalidConfig.
func WithDeclaredVersions(typ string, versions ...int) UpcasterOption {
	return func(c *upcastConfig) error {
		if typ == "" || len(versions) == 0 || slices.Min(versions) < 1 {
			return fmt.Errorf("%w: WithDeclaredVersions(%q, %v): want a type and versions >= 1", ErrInvalidConfig, typ, versions)
		}
		vs := slices.Clone(versions)
		slices.Sort(vs)
		c.declared[typ] = slices.Compact(vs)
		return nil
	}
}

// NewUpcasters applies opts in order and returns the upcasters, or the first option's
// error (matching ErrInvalidConfig).
func NewUpcasters(opts ...UpcasterOption) (*Upcasters, error) {
	c := upcastConfig{steps: make(map[string]map[int]upcastStep), declared: make(map[string][]int)}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: NewUpcasters: nil option", ErrInvalidConfig)
		}
		if err := opt(&c); err != nil {
			return nil, err
		}
	}
	u := &Upcasters{steps: c.steps, declared: c.declared}
	for typ, steps := range c.steps {
		if _, ok := u.declared[typ]; !ok {
			highest := 0
			for _, s := range steps {
				highest = max(highest, s.to)
			}
			u.declared[typ] = []int{highest}
		}
	}
	return u, nil
}

// Declared returns the schema versions the handler of typ accepts, sorted, and false
// when the upcasters say nothing about typ (any version is handled as it is).
func (u *Upcasters) Declared(typ string) ([]int, bool) {
	vs, ok := u.declared[typ]
	return slices.Clone(vs), ok
}

// upcastRecord is the Middleware that hands the handlers it wraps only the schema versions
// they declare (see Upcasters): an event whose type has declared versions and whose
// version is not one of them is brought to the first declared version its upcasters
// reach, chained, and the message's Event carries that version and payload from then
// on. Place it after the signature and trust checks and the router's filter, which see
// the record as it was produced, and before Lock and Idempotent: the idempotency
// request hash is still taken on the payload as received (so a record handled at v1
// before an upgrade is a duplicate, not a key reuse, when it is replayed at v2 after
// it), and a dead letter carries the original record, which a replay upcasts again.
//
// A version with no path to a declared one (a newer version than the handler knows, or
// a gap in the upcasters) fails with ErrUnsupportedVersion, and a failing upcaster with
// ErrUpcast: both are non-retryable, so the record is dead-lettered with the reason
// ("unsupported_version", "upcast_failed") and never silently dropped. A nil u passes
// every message through. It needs a decoded message (see Decode).
func upcastRecord(u *Upcasters) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			if err := u.apply(m); err != nil {
				return err
			}
			return next(ctx, m)
		}
	}
}

// apply upcasts m's event to a declared version of its type. Upcast and StandardBatch
// both call it; a message already at a declared version (one upcast before a retry)
// is left as it is.
func (u *Upcasters) apply(m *Message) error {
	if u == nil {
		return nil
	}
	ev := &m.Event
	declared, ok := u.declared[ev.Type]
	if !ok || slices.Contains(declared, ev.SchemaVersion) {
		return nil
	}
	steps := u.steps[ev.Type]
	from, data := ev.SchemaVersion, ev.Data
	v := from
	for !slices.Contains(declared, v) {
		s, ok := steps[v]
		if !ok {
			return fmt.Errorf("%w: %q version %d has no upcaster path to a declared version %v (upcasters from versions %v)",
				ErrUnsupportedVersion, ev.Type, from, declared, slices.Sorted(maps.Keys(steps)))
		}
		if v == from {
			data = slices.Clone(data) // the upcaster cannot touch the record's value
		}
		out, err := s.fn(data)
		if err == nil && !json.Valid(out) {
			err = errors.New("returned invalid JSON")
		}
		if err != nil {
			return fmt.Errorf("%w: %q version %d to %d: %w", ErrUpcast, ev.Type, v, s.to, err)
		}
		v, data = s.to, out
	}
	m.received = ev.Data
	m.upcastFrom = from
	ev.SchemaVersion, ev.Data = v, data
	return nil
}

// requestHash is the idempotency request hash of m's event: of its type and its payload
// as received, before any upcast (see Upcast).
func (m *Message) requestHash() []byte {
	data := m.Event.Data
	if m.upcastFrom != 0 {
		data = m.received
	}
	return idempotency.Hash([]byte(m.Event.Type), data)
}
