package event

import (
	"encoding/json"
	"fmt"
	"mime"
	"strconv"
	"strings"
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

// DecodeOption configures a Decoder. An invalid value is an error from NewDecoder that
// wraps ErrInvalidConfig.
type DecodeOption func(*decodeConfig) error

// decodeConfig is what the options of NewDecoder set.
type decodeConfig struct {
	maxPayload int
}

// Decoder decodes records like FromRecord, with limits of its own; build it with
// NewDecoder. It is safe for concurrent use.
type Decoder struct {
	decodeConfig
}

// WithMaxPayloadBytes sets the largest record value the Decoder accepts; n must be
// positive. Default: DefaultMaxPayloadBytes (1 MiB).
func WithMaxPayloadBytes(n int) DecodeOption {
	return func(d *decodeConfig) error {
		if n <= 0 {
			return fmt.Errorf("%w: WithMaxPayloadBytes(%d): want a positive size", ErrInvalidConfig, n)
		}
		d.maxPayload = n
		return nil
	}
}

// NewDecoder returns a Decoder with opts applied in order; the first invalid option is
// its error.
func NewDecoder(opts ...DecodeOption) (*Decoder, error) {
	d := &Decoder{decodeConfig{maxPayload: DefaultMaxPayloadBytes}}
	for _, o := range opts {
		if err := o(&d.decodeConfig); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// defaultDecoder is FromRecord's: every limit at its default.
var defaultDecoder = Decoder{decodeConfig{maxPayload: DefaultMaxPayloadBytes}}

// FromRecord decodes r with the default limits (see Decoder.Decode).
func FromRecord(r *kgo.Record) (Event, error) { return defaultDecoder.Decode(r) }

// Decode decodes a CloudEvents 1.0 record written in either Kafka content mode.
//
// Binary mode (the default, and what ToRecord writes): the value is the payload and the
// attributes are ce_* headers. Required: ce_specversion ("1.0"), ce_id (any non-empty
// string up to MaxFieldBytes, the longest idempotency key), ce_type and ce_source.
// Optional, with their defaults: ce_subject (the record key), ce_correlationid (the
// subject, as event.New sets it: an event that names no saga belongs to its entity's),
// ce_causationid (none), ce_time (RFC 3339; the record timestamp) and
// ce_dataschemaversion (1). A content-type header,
// when present, must name JSON (application/json, text/json or any +json type);
// media-type parameters such as charset are accepted.
//
// Structured mode (content-type application/cloudevents+json): the value is the whole
// event as a JSON object; attributes take the same defaults, data is any JSON value
// (absent: null), and extensions (correlationid, causationid, dataschemaversion) are top
// level members. data_base64 and batch mode are refused: choreo payloads are JSON.
//
// The value must be within the payload limit, the key within MaxFieldBytes, and the
// headers within MaxHeaders and MaxHeaderBytes. When a header appears more than once, the
// last one wins. Every error matches ErrMalformed and one of the finer sentinels;
// FromRecord never panics on any input.
func (d *Decoder) Decode(r *kgo.Record) (Event, error) {
	if r == nil {
		return Event{}, &Error{Field: "record", Kind: ErrMissingHeader, Detail: "nil record"}
	}
	if len(r.Value) > d.maxPayload {
		return Event{}, &Error{Field: "data", Kind: ErrPayloadTooLarge, Detail: fmt.Sprintf("%d bytes, limit %d", len(r.Value), d.maxPayload)}
	}
	if len(r.Key) > MaxFieldBytes {
		return Event{}, &Error{Field: "key", Kind: ErrInvalidHeader, Detail: fmt.Sprintf("%d bytes, limit %d", len(r.Key), MaxFieldBytes)}
	}
	if len(r.Headers) > MaxHeaders {
		return Event{}, &Error{Field: "headers", Kind: ErrInvalidHeader, Detail: fmt.Sprintf("%d headers, limit %d", len(r.Headers), MaxHeaders)}
	}
	h := make(map[string]string, len(r.Headers))
	size := 0
	for _, rh := range r.Headers {
		size += len(rh.Key) + len(rh.Value)
		h[rh.Key] = string(rh.Value)
	}
	if size > MaxHeaderBytes {
		return Event{}, &Error{Field: "headers", Kind: ErrInvalidHeader, Detail: fmt.Sprintf("%d bytes, limit %d", size, MaxHeaderBytes)}
	}
	var (
		e   Event
		err error
	)
	structured, err := contentMode(h)
	if err != nil {
		return Event{}, err
	}
	if structured {
		e, err = fromStructured(r.Value)
	} else {
		e, err = fromBinary(h, r.Value)
	}
	if err != nil {
		return Event{}, err
	}
	if e.Time.IsZero() {
		e.Time = r.Timestamp.UTC()
	}
	if e.Subject == "" {
		if len(r.Key) == 0 {
			return Event{}, &Error{Field: "subject", Kind: ErrMissingHeader, Detail: "no subject and no record key"}
		}
		e.Subject = string(r.Key)
	}
	if e.CorrelationID == "" {
		e.CorrelationID = e.Subject // as New: the entity's saga
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// Media types FromRecord tells apart (without parameters).
const (
	structuredContentType = "application/cloudevents+json"
	batchContentType      = "application/cloudevents-batch+json"
)

// contentMode reports whether the record is in structured mode, from its content-type
// header, and refuses content types that are not JSON.
func contentMode(h map[string]string) (structured bool, err error) {
	ct, ok := h[HeaderContentType]
	if !ok {
		return false, nil
	}
	mt, _, perr := mime.ParseMediaType(ct)
	switch {
	case perr != nil:
		return false, &Error{Field: "datacontenttype", Kind: ErrInvalidHeader, Detail: fmt.Sprintf("%q is not a media type", clip(ct))}
	case mt == structuredContentType:
		return true, nil
	case mt == batchContentType:
		return false, &Error{Field: "datacontenttype", Kind: ErrInvalidHeader, Detail: "CloudEvents batch mode is not supported; send one event per record"}
	case strings.HasPrefix(mt, "application/cloudevents"):
		return false, &Error{Field: "datacontenttype", Kind: ErrInvalidHeader, Detail: fmt.Sprintf("structured mode %q is not supported; use %s", clip(mt), structuredContentType)}
	case !isJSON(mt):
		return false, &Error{Field: "datacontenttype", Kind: ErrInvalidHeader, Detail: fmt.Sprintf("%q is not JSON; choreo payloads are %s", clip(ct), ContentType)}
	}
	return false, nil
}

func isJSON(mediaType string) bool {
	return mediaType == ContentType || mediaType == "text/json" || strings.HasSuffix(mediaType, "+json")
}

// fromBinary reads the attributes of a binary-mode record from its headers.
func fromBinary(h map[string]string, value []byte) (Event, error) {
	spec, ok := h[HeaderSpecVersion]
	if !ok {
		return Event{}, &Error{Field: "specversion", Kind: ErrMissingHeader, Detail: "no " + HeaderSpecVersion + " header"}
	}
	if spec != SpecVersion {
		return Event{}, &Error{Field: "specversion", Kind: ErrUnsupportedSpecVersion, Detail: fmt.Sprintf("%q, want %q", clip(spec), SpecVersion)}
	}
	e := Event{
		ID:            h[HeaderID],
		Type:          h[HeaderType],
		Source:        h[HeaderSource],
		Subject:       h[HeaderSubject],
		CorrelationID: h[HeaderCorrelationID],
		CausationID:   h[HeaderCausationID],
		SchemaVersion: 1,
		Data:          json.RawMessage(value),
	}
	if e.ID == "" {
		return Event{}, &Error{Field: "id", Kind: ErrMissingHeader, Detail: "no " + HeaderID + " header"}
	}
	if t, ok := h[HeaderTime]; ok {
		parsed, err := parseTime(t)
		if err != nil {
			return Event{}, err
		}
		e.Time = parsed
	}
	if v, ok := h[HeaderSchemaVersion]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return Event{}, &Error{Field: "dataschemaversion", Kind: ErrInvalidHeader, Detail: fmt.Sprintf("%q is not an integer", clip(v))}
		}
		e.SchemaVersion = n
	}
	return e, nil
}

// fromStructured reads a structured-mode record: the whole event as one JSON object.
func fromStructured(value []byte) (Event, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(value, &m); err != nil {
		return Event{}, &Error{Field: "data", Kind: ErrInvalidPayload, Detail: "structured-mode value is not a JSON object"}
	}
	str := func(name string) (string, error) {
		raw, ok := m[name]
		if !ok || string(raw) == "null" {
			return "", nil
		}
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return "", &Error{Field: name, Kind: ErrInvalidHeader, Detail: "not a JSON string"}
		}
		return v, nil
	}
	var (
		e   = Event{SchemaVersion: 1}
		err error
	)
	for _, f := range []struct {
		name string
		dst  *string
	}{
		{"id", &e.ID}, {"type", &e.Type}, {"source", &e.Source}, {"subject", &e.Subject},
		{"correlationid", &e.CorrelationID}, {"causationid", &e.CausationID},
	} {
		if *f.dst, err = str(f.name); err != nil {
			return Event{}, err
		}
	}
	spec, err := str("specversion")
	switch {
	case err != nil:
		return Event{}, err
	case spec == "":
		return Event{}, &Error{Field: "specversion", Kind: ErrMissingHeader, Detail: "no specversion member"}
	case spec != SpecVersion:
		return Event{}, &Error{Field: "specversion", Kind: ErrUnsupportedSpecVersion, Detail: fmt.Sprintf("%q, want %q", clip(spec), SpecVersion)}
	case e.ID == "":
		return Event{}, &Error{Field: "id", Kind: ErrMissingHeader, Detail: "no id member"}
	}
	if t, err := str("time"); err != nil {
		return Event{}, err
	} else if t != "" {
		if e.Time, err = parseTime(t); err != nil {
			return Event{}, err
		}
	}
	if ct, err := str("datacontenttype"); err != nil {
		return Event{}, err
	} else if mt, _, perr := mime.ParseMediaType(ct); ct != "" && (perr != nil || !isJSON(mt)) {
		return Event{}, &Error{Field: "datacontenttype", Kind: ErrInvalidHeader, Detail: fmt.Sprintf("%q is not JSON; choreo payloads are %s", clip(ct), ContentType)}
	}
	if raw, ok := m["dataschemaversion"]; ok {
		// An integer extension: a JSON number, or a string holding one.
		var n int
		if err := json.Unmarshal(raw, &n); err != nil {
			s, serr := str("dataschemaversion")
			if n, err = strconv.Atoi(s); serr != nil || err != nil {
				return Event{}, &Error{Field: "dataschemaversion", Kind: ErrInvalidHeader, Detail: "not an integer"}
			}
		}
		e.SchemaVersion = n
	}
	if _, ok := m["data_base64"]; ok {
		return Event{}, &Error{Field: "data", Kind: ErrInvalidPayload, Detail: "data_base64 is not supported; choreo payloads are JSON"}
	}
	e.Data = json.RawMessage("null")
	if raw, ok := m["data"]; ok {
		e.Data = raw
	}
	return e, nil
}

func parseTime(t string) (time.Time, error) {
	parsed, err := time.Parse(time.RFC3339Nano, t)
	if err != nil {
		return time.Time{}, &Error{Field: "time", Kind: ErrInvalidHeader, Detail: fmt.Sprintf("%q is not RFC 3339", clip(t))}
	}
	return parsed.UTC(), nil
}
