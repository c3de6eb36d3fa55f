package event

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Event is the envelope of one domain event. On the wire it is a Kafka record in
// CloudEvents binary content mode: Data is the record value and every other field is a
// ce_* header (see ToRecord and FromRecord).
type Event struct {
	// ID uniquely identifies the event within its source: New makes a UUID; events of
	// other producers may carry any non-empty string up to MaxFieldBytes. Consumers use
	// it as their idempotency key.
	ID string
	// Type names what happened, in "<entity>.<past-tense verb>" form, e.g. "order.created".
	Type string
	// Source names the producing service, e.g. "order".
	Source string
	// Subject is the id of the entity the event is about. It is also the Kafka record key,
	// so all events of one entity land on one partition, in order.
	Subject string
	// Time is when the event happened.
	Time time.Time
	// SchemaVersion is the version of the payload's schema, starting at 1.
	SchemaVersion int
	// CorrelationID is the id of the saga the event belongs to; every event of one saga
	// carries the same value.
	CorrelationID string
	// CausationID is the ID of the event that caused this one; empty for the first event
	// of a saga.
	CausationID string
	// Data is the JSON payload.
	Data json.RawMessage
}

// Limits on envelope fields, checked by Validate and FromRecord.
const (
	// MaxFieldBytes bounds every string field of the envelope.
	MaxFieldBytes = 255
	// DefaultMaxPayloadBytes is the payload size limit FromRecord applies unless
	// WithMaxPayloadBytes says otherwise.
	DefaultMaxPayloadBytes = 1 << 20
	// MaxHeaders bounds the number of headers of a record FromRecord accepts.
	MaxHeaders = 64
	// MaxHeaderBytes bounds the total size of a record's header keys and values.
	MaxHeaderBytes = 32 << 10
)

// New returns an event of the given type about subject, with a fresh time-ordered UUID,
// the current UTC time, schema version 1, data marshalled to JSON, and the correlation id
// set to the subject, which starts a new saga named after its entity (FromRecord gives a
// record without ce_correlationid the same default). Use CausedBy to continue an
// existing saga.
func New(source, typ, subject string, data any) (Event, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Event{}, fmt.Errorf("event: new id: %w", err)
	}
	payload, err := json.Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("event: marshal %s payload: %w", typ, err)
	}
	e := Event{
		ID:            id.String(),
		Type:          typ,
		Source:        source,
		Subject:       subject,
		Time:          time.Now().UTC(),
		SchemaVersion: 1,
		CorrelationID: subject,
		Data:          payload,
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// CausedBy returns a copy of e that continues parent's saga: it takes parent's
// correlation id and records parent's id as its causation id.
func (e Event) CausedBy(parent Event) Event {
	e.CorrelationID = parent.CorrelationID
	e.CausationID = parent.ID
	return e
}

// DecodeData unmarshals the JSON payload into v. A payload that does not fit v is
// malformed input: the error matches ErrInvalidPayload and ErrMalformed.
func (e Event) DecodeData(v any) error {
	if err := json.Unmarshal(e.Data, v); err != nil {
		return &Error{Field: "data", Kind: ErrInvalidPayload, Detail: err.Error()}
	}
	return nil
}

// Validate reports whether e is a well-formed envelope: non-empty id, type, source,
// subject and correlation id, each at most MaxFieldBytes; a schema version of at least 1;
// and a valid JSON payload. Every string field (the causation id too) must be valid
// UTF-8 without a NUL byte, as a Postgres text column requires: an event whose
// attributes could not be stored is refused here, by the decoder, instead of failing
// every transaction that stores it. Every error it returns matches ErrMalformed.
func (e Event) Validate() error {
	for _, f := range []struct{ name, value string }{
		{"id", e.ID}, {"type", e.Type}, {"source", e.Source}, {"subject", e.Subject}, {"correlationid", e.CorrelationID},
	} {
		if f.value == "" {
			return &Error{Field: f.name, Kind: ErrMissingHeader, Detail: "empty"}
		}
		if err := storable(f.name, f.value); err != nil {
			return err
		}
	}
	if err := storable("causationid", e.CausationID); err != nil {
		return err
	}
	if e.SchemaVersion < 1 {
		return &Error{Field: "dataschemaversion", Kind: ErrInvalidHeader, Detail: fmt.Sprintf("%d, must be >= 1", e.SchemaVersion)}
	}
	if !json.Valid(e.Data) {
		return &Error{Field: "data", Kind: ErrInvalidPayload, Detail: "not valid JSON"}
	}
	return nil
}

// storable refuses a field value Postgres cannot keep in a text column: over
// MaxFieldBytes, invalid UTF-8, or with a NUL byte.
func storable(name, v string) error {
	switch {
	case len(v) > MaxFieldBytes:
		return &Error{Field: name, Kind: ErrInvalidHeader, Detail: fmt.Sprintf("%d bytes, limit %d", len(v), MaxFieldBytes)}
	case !utf8.ValidString(v):
		return &Error{Field: name, Kind: ErrInvalidHeader, Detail: "not valid UTF-8"}
	case strings.IndexByte(v, 0) >= 0:
		return &Error{Field: name, Kind: ErrInvalidHeader, Detail: "contains a NUL byte"}
	}
	return nil
}

// clip shortens untrusted input before it goes into an error message.
func clip(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
