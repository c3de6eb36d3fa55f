package contract

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
)

// Role says whether a service writes or reads the events of a declaration.
type Role string

// Roles.
const (
	// Produces: the service publishes these events, and its payloads are valid under the
	// schema (the producer validates each payload before it is stored in the outbox).
	Produces Role = "produces"
	// Consumes: the service handles these events, and refuses (dead-letters as
	// malformed) a payload its schema does not accept.
	Consumes Role = "consumes"
	// Accepts: the service reads these events by upcasting them to a version it
	// consumes; the schema is the upcaster's input, which it refuses a payload outside
	// of (dead-lettered as "upcast_failed").
	Accepts Role = "accepts"
)

// Declaration is one service's contract for one kind of event: what it writes or reads
// for (topic, type, schema version).
type Declaration struct {
	// Service names the declaring service (its ce_source when it produces).
	Service string `json:"service"`
	// Role says whether it produces, consumes or accepts (upcasts) the events.
	Role Role `json:"role"`
	// Topic is the Kafka topic the events travel on.
	Topic string `json:"topic"`
	// Type is the CloudEvents type (ce_type), e.g. "payment.authorized".
	Type string `json:"type"`
	// Version is the payload schema version (ce_dataschemaversion), from 1.
	Version int `json:"version"`
	// Payload names the Go type of the payload, e.g. "events.PaymentV1".
	Payload string `json:"payload"`
	// Schema is the payload's JSON Schema 2020-12: what the producer always writes, or
	// what the consumer accepts.
	Schema json.RawMessage `json:"schema"`
}

// Declare returns the declaration of service in role for payloads of type T (its schema
// from [SchemaOf]).
func Declare[T any](service string, role Role, topic, eventType string, version int) (Declaration, error) {
	d := Declaration{Service: service, Role: role, Topic: topic, Type: eventType, Version: version,
		Payload: typeName(reflect.TypeFor[T]())}
	s, err := SchemaOf[T]()
	if err != nil {
		return Declaration{}, err
	}
	d.Schema = s.JSON()
	return d, d.validate()
}

// typeName is the short name of a Go type: "events.PaymentV1".
func typeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.String()
}

// validate reports an incomplete declaration.
func (d Declaration) validate() error {
	switch {
	case d.Service == "" || d.Topic == "" || d.Type == "":
		return fmt.Errorf("%w: declaration %+v: empty service, topic or type", ErrInvalidCatalogue, d.Key())
	case d.Role != Produces && d.Role != Consumes && d.Role != Accepts:
		return fmt.Errorf("%w: %s of %s: role %q, want %q, %q or %q", ErrInvalidCatalogue, d.Service, d.Key(), d.Role, Produces, Consumes, Accepts)
	case d.Version < 1:
		return fmt.Errorf("%w: %s of %s: version %d, want >= 1", ErrInvalidCatalogue, d.Service, d.Key(), d.Version)
	case len(d.Schema) == 0:
		return fmt.Errorf("%w: %s of %s: no schema", ErrInvalidCatalogue, d.Service, d.Key())
	}
	return nil
}

// Key identifies a kind of event: its type and payload schema version.
type Key struct {
	Type    string `json:"type"`
	Version int    `json:"version"`
}

func (k Key) String() string { return fmt.Sprintf("%s v%d", k.Type, k.Version) }

// Key returns d's (type, version).
func (d Declaration) Key() Key { return Key{d.Type, d.Version} }

// Catalogue is the set of declarations of a choreography: every service's events
// produced and consumed with their payload schemas. Its JSON form is the baseline file of
// `sagactl contracts check`. The zero value is empty.
type Catalogue struct {
	// Declarations, sorted by type, version, role (producers first) and service.
	Declarations []Declaration `json:"declarations"`
}

// NewCatalogue returns the catalogue of decls, sorted; it fails on an incomplete
// declaration or one declared twice.
func NewCatalogue(decls ...Declaration) (Catalogue, error) {
	c := Catalogue{Declarations: slices.Clone(decls)}
	slices.SortFunc(c.Declarations, compare)
	for i, d := range c.Declarations {
		if err := d.validate(); err != nil {
			return Catalogue{}, err
		}
		if i > 0 && compare(c.Declarations[i-1], d) == 0 {
			return Catalogue{}, fmt.Errorf("%w: %s %s %s twice", ErrInvalidCatalogue, d.Service, d.Role, d.Key())
		}
	}
	return c, nil
}

func compare(a, b Declaration) int {
	return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Version, b.Version),
		cmp.Compare(roleOrder(a.Role), roleOrder(b.Role)), cmp.Compare(a.Service, b.Service), cmp.Compare(a.Topic, b.Topic))
}

func roleOrder(r Role) int {
	switch r {
	case Produces:
		return 0
	case Consumes:
		return 1
	}
	return 2
}

// ReadCatalogue reads a catalogue in its JSON form (as WriteJSON writes it).
func ReadCatalogue(r io.Reader) (Catalogue, error) {
	var c Catalogue
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Catalogue{}, fmt.Errorf("%w: %w", ErrInvalidCatalogue, err)
	}
	for _, d := range c.Declarations {
		if _, err := ParseSchema(d.Schema); err != nil {
			return Catalogue{}, fmt.Errorf("%w: %s %s %s: %w", ErrInvalidCatalogue, d.Service, d.Role, d.Key(), err)
		}
	}
	return NewCatalogue(c.Declarations...)
}

// WriteJSON writes c as indented JSON (the baseline file's form).
func (c Catalogue) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Keys returns every (type, version) of c, sorted.
func (c Catalogue) Keys() []Key {
	var ks []Key
	for _, d := range c.Declarations {
		if k := d.Key(); len(ks) == 0 || ks[len(ks)-1] != k {
			ks = append(ks, k)
		}
	}
	return ks
}

// Producers returns the declarations of the services that produce k, by service.
func (c Catalogue) Producers(k Key) []Declaration { return c.find(k, Produces) }

// Consumers returns the declarations of the services that read k, by role (consumes,
// then accepts) and service: a handler of k, or an upcaster from k to a version the
// service handles. Both refuse a payload their schema does not accept.
func (c Catalogue) Consumers(k Key) []Declaration { return c.find(k, Consumes, Accepts) }

func (c Catalogue) find(k Key, roles ...Role) []Declaration {
	var out []Declaration
	for _, d := range c.Declarations {
		if d.Key() == k && slices.Contains(roles, d.Role) {
			out = append(out, d)
		}
	}
	return out
}

// reads reports whether service reads some version of eventType in c other than
// except that a producer in prod writes: it still has events of that type to handle.
func (c Catalogue) reads(service, eventType string, except int, prod Catalogue) bool {
	for _, d := range c.Declarations {
		if d.Service == service && d.Type == eventType && d.Version != except && d.Role != Produces &&
			len(prod.Producers(d.Key())) > 0 {
			return true
		}
	}
	return false
}

// Services returns the names of the services that declare something, sorted.
func (c Catalogue) Services() []string {
	var out []string
	for _, d := range c.Declarations {
		if !slices.Contains(out, d.Service) {
			out = append(out, d.Service)
		}
	}
	slices.Sort(out)
	return out
}

// Schemas returns, for one (type, version), the compiled schema of each service that
// declares it, by role: what a checker of observed payloads validates each payload
// against (the producer's schema says what it promises, each consumer's what it accepts).
func (c Catalogue) Schemas(k Key) (producers, consumers map[string]*Schema, err error) {
	producers, consumers = map[string]*Schema{}, map[string]*Schema{}
	for _, d := range c.Declarations {
		if d.Key() != k {
			continue
		}
		s, err := ParseSchema(d.Schema)
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s %s: %w", d.Service, d.Role, k, err)
		}
		if d.Role == Produces {
			producers[d.Service] = s
		} else {
			consumers[d.Service] = s
		}
	}
	return producers, consumers, nil
}
