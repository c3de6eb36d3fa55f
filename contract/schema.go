package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/invopop/jsonschema"
	santhosh "github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/choreo-saga/choreo/event"
)

// Dialect is the JSON Schema dialect ($schema) of every schema of this package.
const Dialect = "https://json-schema.org/draft/2020-12/schema"

// Schema is the JSON Schema (2020-12) of one payload type, compiled for validation. It is
// immutable and safe for concurrent use.
type Schema struct {
	doc json.RawMessage
	val *santhosh.Schema
}

// schemas caches the Schema of each payload type, as encoding/json caches its encoders:
// derived from the type alone, never changed after it is stored.
var schemas sync.Map // reflect.Type → *Schema

// SchemaOf returns the schema of T's JSON form (see [SchemaFor]).
func SchemaOf[T any]() (*Schema, error) {
	return SchemaFor(reflect.TypeFor[T]())
}

// SchemaFor returns the JSON Schema of the JSON form of t as encoding/json reads and
// writes it, with github.com/invopop/jsonschema:
//
//   - a property per exported field, named by its json tag; a field without omitempty
//     (or omitzero) is required, since encoding/json always writes it;
//   - unknown properties are allowed ("additionalProperties": true): a reader ignores
//     fields it does not know, so a producer may add one;
//   - bounds and enums come from jsonschema struct tags (maxLength=128, minimum=1,
//     maxItems=100, enum=a,enum=b), meanings from jsonschema_description tags and
//     examples from example= tags;
//   - nested structs are inlined (no $ref), so a schema stands alone.
//
// [Decode] enforces every keyword of it. t must be a struct type (or a pointer to one).
func SchemaFor(t reflect.Type) (*Schema, error) {
	if s, ok := schemas.Load(t); ok {
		return s.(*Schema), nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: payload type %s is not a struct", ErrInvalidSchema, t)
	}
	r := jsonschema.Reflector{Anonymous: true, DoNotReference: true, ExpandedStruct: true, AllowAdditionalProperties: true}
	js := r.ReflectFromType(t)
	open(js)
	doc, err := json.Marshal(js)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidSchema, t, err)
	}
	s, err := ParseSchema(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t, err)
	}
	actual, _ := schemas.LoadOrStore(t, s)
	return actual.(*Schema), nil
}

// open states the unknown-field policy on every object of s: additional properties are
// allowed (they are JSON Schema's default; stating it keeps a reader from guessing).
func open(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if s.Type == "object" && s.AdditionalProperties == nil {
		s.AdditionalProperties = jsonschema.TrueSchema
	}
	if s.Properties != nil {
		for p := s.Properties.Oldest(); p != nil; p = p.Next() {
			open(p.Value)
		}
	}
	open(s.Items)
	for _, x := range s.OneOf {
		open(x)
	}
}

// ParseSchema compiles doc, a JSON Schema 2020-12 document (as [Schema.JSON] returns or
// a schema file holds). The error matches [ErrInvalidSchema].
func ParseSchema(doc []byte) (*Schema, error) {
	v, err := santhosh.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	const loc = "choreo:payload.json"
	c := santhosh.NewCompiler()
	c.DefaultDraft(santhosh.Draft2020)
	if err := c.AddResource(loc, v); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	val, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	var canon bytes.Buffer
	if err := json.Compact(&canon, doc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	return &Schema{doc: canon.Bytes(), val: val}, nil
}

// JSON returns the schema document (compact JSON). The caller must not modify it.
func (s *Schema) JSON() json.RawMessage { return s.doc }

// Validate reports whether data, a JSON payload, is valid under s. The error matches
// event.ErrInvalidPayload and event.ErrMalformed, and says where data breaks s.
func (s *Schema) Validate(data []byte) error {
	v, err := santhosh.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return &event.Error{Field: "data", Kind: event.ErrInvalidPayload, Detail: "not valid JSON"}
	}
	if err := s.val.Validate(v); err != nil {
		return &event.Error{Field: "data", Kind: event.ErrInvalidPayload, Detail: violation(err)}
	}
	return nil
}

// violation condenses a validation error into its first leaf causes, at most 256 bytes.
func violation(err error) string {
	var ve *santhosh.ValidationError
	if !errors.As(err, &ve) {
		return clip(err.Error(), 256)
	}
	var parts []string
	var leaves func(e *santhosh.ValidationError)
	leaves = func(e *santhosh.ValidationError) {
		if len(e.Causes) == 0 {
			at := "/" + strings.Join(e.InstanceLocation, "/")
			parts = append(parts, fmt.Sprintf("at %s: %s", at, e.ErrorKind.LocalizedString(printer)))
			return
		}
		for _, c := range e.Causes {
			leaves(c)
		}
	}
	leaves(ve)
	return clip(strings.Join(parts, "; "), 256)
}

// printer renders validation errors in English.
var printer = message.NewPrinter(language.English)

// clip shortens s to n bytes.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Subjecter is implemented by a payload that names the entity it is about. [Decode]
// checks that it names the event's subject (the Kafka key), so that a payload about
// another entity than its key is refused as malformed.
type Subjecter interface {
	Subject() string
}

// Decode returns ev's payload as a T: the payload is validated against T's schema
// ([SchemaFor]: required fields, types, bounds, enums), then unmarshalled; if T is a
// [Subjecter], its subject must be ev.Subject. Every error matches
// event.ErrInvalidPayload and event.ErrMalformed (a consumer dead-letters the event at
// once, reason "malformed") and starts with the event type.
func Decode[T any](ev event.Event) (T, error) {
	var p, zero T
	s, err := SchemaOf[T]()
	if err != nil {
		return zero, err
	}
	if err := s.Validate(ev.Data); err != nil {
		return zero, fmt.Errorf("%s: %w", ev.Type, err)
	}
	if err := ev.DecodeData(&p); err != nil {
		return zero, fmt.Errorf("%s: %w", ev.Type, err)
	}
	if sp, ok := any(p).(Subjecter); ok && sp.Subject() != ev.Subject {
		return zero, fmt.Errorf("%s: %w", ev.Type, &event.Error{Field: "data", Kind: event.ErrInvalidPayload,
			Detail: fmt.Sprintf("payload is about %q, not the subject %q", clip(sp.Subject(), 128), clip(ev.Subject, 128))})
	}
	return p, nil
}
