package event

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// CloudEvents Kafka binary content mode header names, and the extensions choreo adds.
const (
	HeaderID            = "ce_id"
	HeaderType          = "ce_type"
	HeaderSource        = "ce_source"
	HeaderSpecVersion   = "ce_specversion"
	HeaderTime          = "ce_time"
	HeaderSubject       = "ce_subject"
	HeaderCorrelationID = "ce_correlationid"
	HeaderCausationID   = "ce_causationid"
	HeaderSchemaVersion = "ce_dataschemaversion"
	HeaderContentType   = "content-type"

	// SpecVersion is the CloudEvents version choreo writes and accepts.
	SpecVersion = "1.0"
	// ContentType is the media type of every payload.
	ContentType = "application/json"
)

// ToRecord encodes e as a Kafka record for topic: key = Subject, value = Data, and the
// envelope as CloudEvents binary-mode headers. It validates e first. Trace context headers
// are added separately (see package tracing).
func ToRecord(topic string, e Event) (*kgo.Record, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	hs := []kgo.RecordHeader{
		{Key: HeaderSpecVersion, Value: []byte(SpecVersion)},
		{Key: HeaderID, Value: []byte(e.ID)},
		{Key: HeaderType, Value: []byte(e.Type)},
		{Key: HeaderSource, Value: []byte(e.Source)},
		{Key: HeaderSubject, Value: []byte(e.Subject)},
		{Key: HeaderTime, Value: []byte(e.Time.UTC().Format(time.RFC3339Nano))},
		{Key: HeaderCorrelationID, Value: []byte(e.CorrelationID)},
		{Key: HeaderSchemaVersion, Value: []byte(strconv.Itoa(e.SchemaVersion))},
		{Key: HeaderContentType, Value: []byte(ContentType)},
	}
	if e.CausationID != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderCausationID, Value: []byte(e.CausationID)})
	}
	return &kgo.Record{
		Topic:   topic,
		Key:     []byte(e.Subject),
		Value:   []byte(e.Data),
		Headers: hs,
	}, nil
}

// DecodeOption configures FromRecord.
type DecodeOption func(*decoder)

type decoder struct {
	maxPayload int
}

// MaxPayloadBytes sets the largest record value FromRecord accepts. The default is
// DefaultMaxPayloadBytes (1 MiB); n <= 0 keeps the default.
func MaxPayloadBytes(n int) DecodeOption {
	return func(d *decoder) {
		if n > 0 {
			d.maxPayload = n
		}
	}
}

// FromRecord decodes a record written in CloudEvents binary content mode. Required headers:
// ce_specversion ("1.0"), ce_id (a UUID), ce_type, ce_source, ce_subject and
// ce_correlationid; ce_time (RFC 3339), ce_causationid and ce_dataschemaversion (default 1)
// are optional. The value must be valid JSON within the payload limit. When a header
// appears more than once, the last one wins, as with any header map. Every error matches
// ErrMalformed and one of the finer sentinels; FromRecord never panics on any input.
func FromRecord(r *kgo.Record, opts ...DecodeOption) (Event, error) {
	d := decoder{maxPayload: DefaultMaxPayloadBytes}
	for _, o := range opts {
		o(&d)
	}
	if r == nil {
		return Event{}, &Error{Field: "record", Kind: ErrMissingHeader, Detail: "nil record"}
	}
	h := make(map[string]string, len(r.Headers))
	for _, rh := range r.Headers {
		h[rh.Key] = string(rh.Value)
	}

	spec, ok := h[HeaderSpecVersion]
	if !ok {
		return Event{}, &Error{Field: "specversion", Kind: ErrMissingHeader, Detail: "no " + HeaderSpecVersion + " header"}
	}
	if spec != SpecVersion {
		return Event{}, &Error{Field: "specversion", Kind: ErrUnsupportedSpecVersion, Detail: fmt.Sprintf("%q, want %q", clip(spec), SpecVersion)}
	}
	if len(r.Value) > d.maxPayload {
		return Event{}, &Error{Field: "data", Kind: ErrPayloadTooLarge, Detail: fmt.Sprintf("%d bytes, limit %d", len(r.Value), d.maxPayload)}
	}
	if ct, ok := h[HeaderContentType]; ok && ct != ContentType {
		return Event{}, &Error{Field: "datacontenttype", Kind: ErrInvalidHeader, Detail: fmt.Sprintf("%q, want %q", clip(ct), ContentType)}
	}

	e := Event{
		ID:            h[HeaderID],
		Type:          h[HeaderType],
		Source:        h[HeaderSource],
		Subject:       h[HeaderSubject],
		CorrelationID: h[HeaderCorrelationID],
		CausationID:   h[HeaderCausationID],
		SchemaVersion: 1,
		Data:          json.RawMessage(r.Value),
	}
	if e.ID == "" {
		return Event{}, &Error{Field: "id", Kind: ErrMissingHeader, Detail: "no " + HeaderID + " header"}
	}
	if t, ok := h[HeaderTime]; ok {
		parsed, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return Event{}, &Error{Field: "time", Kind: ErrInvalidHeader, Detail: fmt.Sprintf("%q is not RFC 3339", clip(t))}
		}
		e.Time = parsed.UTC()
	} else {
		e.Time = r.Timestamp.UTC()
	}
	if v, ok := h[HeaderSchemaVersion]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return Event{}, &Error{Field: "dataschemaversion", Kind: ErrInvalidHeader, Detail: fmt.Sprintf("%q is not an integer", clip(v))}
		}
		e.SchemaVersion = n
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}
