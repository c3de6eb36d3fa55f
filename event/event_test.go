package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/event"
	"github.com/twmb/franz-go/pkg/kgo"
)

func mustEvent(t testing.TB) event.Event {
	t.Helper()
	e, err := event.New("order", "order.created", "o-1", map[string]int{"amount": 10})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestRoundTrip(t *testing.T) {
	parent := mustEvent(t)
	e, err := event.New("payment", "payment.authorized", "o-1", map[string]int{"charged": 10})
	if err != nil {
		t.Fatal(err)
	}
	e = e.CausedBy(parent)
	e.SchemaVersion = 3
	rec, err := event.ToRecord("payments.events", e)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Topic != "payments.events" || string(rec.Key) != "o-1" || !bytes.Equal(rec.Value, e.Data) {
		t.Fatalf("record topic/key/value = %q/%q/%q", rec.Topic, rec.Key, rec.Value)
	}
	got, err := event.FromRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Time.Equal(e.Time) {
		t.Fatalf("time %v != %v", got.Time, e.Time)
	}
	got.Time = e.Time
	if gj, _ := json.Marshal(got); !bytes.Equal(gj, mustJSON(t, e)) {
		t.Fatalf("round trip changed the event:\n got %s\nwant %s", gj, mustJSON(t, e))
	}
	if got.CorrelationID != parent.CorrelationID || got.CausationID != parent.ID {
		t.Fatalf("causality lost: %+v", got)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNewDefaults(t *testing.T) {
	e := mustEvent(t)
	if e.SchemaVersion != 1 || e.CorrelationID != "o-1" || e.CausationID != "" || e.Time.Location() != time.UTC {
		t.Fatalf("unexpected defaults: %+v", e)
	}
	if _, err := event.New("order", "order.created", "o-1", func() {}); err == nil {
		t.Fatal("unmarshalable payload accepted")
	}
	if _, err := event.New("order", "", "o-1", nil); !errors.Is(err, event.ErrMissingHeader) {
		t.Fatalf("empty type: %v", err)
	}
}

// headers returns rec's headers with key set to value (or removed when value is nil).
func withHeader(rec *kgo.Record, key string, value []byte) *kgo.Record {
	out := *rec
	out.Headers = nil
	found := false
	for _, h := range rec.Headers {
		if h.Key == key {
			found = true
			if value == nil {
				continue
			}
			h.Value = value
		}
		out.Headers = append(out.Headers, h)
	}
	if !found && value != nil {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: key, Value: value})
	}
	return &out
}

// manyHeaders returns rec with n more headers of size bytes each.
func manyHeaders(rec *kgo.Record, n, size int) *kgo.Record {
	out := *rec
	out.Headers = append([]kgo.RecordHeader(nil), rec.Headers...)
	for i := range n {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: fmt.Sprintf("x-%d", i), Value: bytes.Repeat([]byte("v"), size)})
	}
	return &out
}

func withKey(rec *kgo.Record, key []byte) *kgo.Record {
	out := *rec
	out.Key = key
	return &out
}

// structured returns a structured-mode record with the given value and key "k".
func structured(value string) *kgo.Record {
	return &kgo.Record{
		Key:     []byte("k"),
		Value:   []byte(value),
		Headers: []kgo.RecordHeader{{Key: event.HeaderContentType, Value: []byte("application/cloudevents+json; charset=utf-8")}},
	}
}

func TestFromRecordRejectsBadInput(t *testing.T) {
	good, err := event.ToRecord("t", mustEvent(t))
	if err != nil {
		t.Fatal(err)
	}
	withValue := func(v []byte) *kgo.Record { r := *good; r.Value = v; return &r }
	tests := []struct {
		name string
		rec  *kgo.Record
		opts []event.DecodeOption
		kind error
		msg  string
	}{
		{"nil record", nil, nil, event.ErrMissingHeader, "nil record"},
		{"no specversion", withHeader(good, event.HeaderSpecVersion, nil), nil, event.ErrMissingHeader, "specversion"},
		{"wrong specversion", withHeader(good, event.HeaderSpecVersion, []byte("0.3")), nil, event.ErrUnsupportedSpecVersion, `"0.3"`},
		{"no id", withHeader(good, event.HeaderID, nil), nil, event.ErrMissingHeader, "id"},
		{"long id", withHeader(good, event.HeaderID, bytes.Repeat([]byte("i"), 256)), nil, event.ErrInvalidHeader, "limit 255"},
		{"NUL in id", withHeader(good, event.HeaderID, []byte("id\x00x")), nil, event.ErrInvalidHeader, "id: contains a NUL byte"},
		{"NUL in correlation id", withHeader(good, event.HeaderCorrelationID, []byte("\x00")), nil, event.ErrInvalidHeader, "correlationid: contains a NUL byte"},
		{"NUL in causation id", withHeader(good, event.HeaderCausationID, []byte("c\x00")), nil, event.ErrInvalidHeader, "causationid: contains a NUL byte"},
		{"invalid UTF-8 in subject", withHeader(good, event.HeaderSubject, []byte("o-\xff")), nil, event.ErrInvalidHeader, "subject: not valid UTF-8"},
		{"invalid UTF-8 in source", withHeader(good, event.HeaderSource, []byte("\xc3(")), nil, event.ErrInvalidHeader, "source: not valid UTF-8"},
		{"long causation id", withHeader(good, event.HeaderCausationID, bytes.Repeat([]byte("c"), 256)), nil, event.ErrInvalidHeader, "limit 255"},
		{"no type", withHeader(good, event.HeaderType, nil), nil, event.ErrMissingHeader, "type"},
		{"no source", withHeader(good, event.HeaderSource, nil), nil, event.ErrMissingHeader, "source"},
		{"no subject and no key", withKey(withHeader(good, event.HeaderSubject, nil), nil), nil, event.ErrMissingHeader, "no subject and no record key"},
		{"long type", withHeader(good, event.HeaderType, bytes.Repeat([]byte("x"), 256)), nil, event.ErrInvalidHeader, "limit 255"},
		{"bad time", withHeader(good, event.HeaderTime, []byte("yesterday")), nil, event.ErrInvalidHeader, "RFC 3339"},
		{"bad schema version", withHeader(good, event.HeaderSchemaVersion, []byte("v2")), nil, event.ErrInvalidHeader, "not an integer"},
		{"zero schema version", withHeader(good, event.HeaderSchemaVersion, []byte("0")), nil, event.ErrInvalidHeader, ">= 1"},
		{"wrong content type", withHeader(good, event.HeaderContentType, []byte("text/plain")), nil, event.ErrInvalidHeader, "text/plain"},
		{"unparsable content type", withHeader(good, event.HeaderContentType, []byte("application/json; charset")), nil, event.ErrInvalidHeader, "not a media type"},
		{"batch mode", withHeader(good, event.HeaderContentType, []byte("application/cloudevents-batch+json")), nil, event.ErrInvalidHeader, "batch mode"},
		{"structured non-JSON format", withHeader(good, event.HeaderContentType, []byte("application/cloudevents+avro")), nil, event.ErrInvalidHeader, "not supported"},
		{"long key", withKey(good, bytes.Repeat([]byte("k"), 256)), nil, event.ErrInvalidHeader, "key: 256 bytes, limit 255"},
		{"too many headers", manyHeaders(good, event.MaxHeaders+1-len(good.Headers), 1), nil, event.ErrInvalidHeader, "65 headers, limit 64"},
		{"headers too large", manyHeaders(good, 2, 20<<10), nil, event.ErrInvalidHeader, "limit 32768"},
		{"structured not an object", structured(`[1,2]`), nil, event.ErrInvalidPayload, "not a JSON object"},
		{"structured no specversion", structured(`{"id":"a","type":"t","source":"s","subject":"k"}`), nil, event.ErrMissingHeader, "specversion"},
		{"structured old specversion", structured(`{"specversion":"0.3","id":"a","type":"t","source":"s"}`), nil, event.ErrUnsupportedSpecVersion, "0.3"},
		{"structured no id", structured(`{"specversion":"1.0","type":"t","source":"s"}`), nil, event.ErrMissingHeader, "no id member"},
		{"structured id not a string", structured(`{"specversion":"1.0","id":7,"type":"t","source":"s"}`), nil, event.ErrInvalidHeader, "not a JSON string"},
		{"structured no type", structured(`{"specversion":"1.0","id":"a","source":"s"}`), nil, event.ErrMissingHeader, "type"},
		{"structured bad time", structured(`{"specversion":"1.0","id":"a","type":"t","source":"s","time":"noon"}`), nil, event.ErrInvalidHeader, "RFC 3339"},
		{"structured base64 data", structured(`{"specversion":"1.0","id":"a","type":"t","source":"s","data_base64":"AAE="}`), nil, event.ErrInvalidPayload, "data_base64"},
		{"structured XML data", structured(`{"specversion":"1.0","id":"a","type":"t","source":"s","datacontenttype":"application/xml","data":"<a/>"}`), nil, event.ErrInvalidHeader, "not JSON"},
		{"structured bad schema version", structured(`{"specversion":"1.0","id":"a","type":"t","source":"s","dataschemaversion":"two"}`), nil, event.ErrInvalidHeader, "not an integer"},
		{"invalid json", withValue([]byte(`{"amount":`)), nil, event.ErrInvalidPayload, "JSON"},
		{"empty payload", withValue(nil), nil, event.ErrInvalidPayload, "JSON"},
		{"too large default", withValue([]byte(`"` + strings.Repeat("a", event.DefaultMaxPayloadBytes) + `"`)), nil, event.ErrPayloadTooLarge, "limit 1048576"},
		{"too large configured", withValue([]byte(`"0123456789"`)), []event.DecodeOption{event.WithMaxPayloadBytes(8)}, event.ErrPayloadTooLarge, "12 bytes, limit 8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := event.NewDecoder(tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = d.Decode(tt.rec)
			if !errors.Is(err, event.ErrMalformed) || !errors.Is(err, tt.kind) {
				t.Fatalf("err = %v, want ErrMalformed and %v", err, tt.kind)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err %q does not mention %q", err, tt.msg)
			}
			var ee *event.Error
			if !errors.As(err, &ee) || ee.Field == "" {
				t.Fatalf("err %v is not an *event.Error with a field", err)
			}
		})
	}
}

func TestFromRecordOptionalHeaders(t *testing.T) {
	good, _ := event.ToRecord("t", mustEvent(t))
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := withHeader(withHeader(good, event.HeaderTime, nil), event.HeaderSchemaVersion, nil)
	rec = withHeader(rec, event.HeaderContentType, nil)
	rec.Timestamp = ts
	e, err := event.FromRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Time.Equal(ts) || e.SchemaVersion != 1 {
		t.Fatalf("defaults not applied: time %v version %d", e.Time, e.SchemaVersion)
	}
}

func TestDecodeData(t *testing.T) {
	e := mustEvent(t)
	var p struct{ Amount int }
	if err := e.DecodeData(&p); err != nil || p.Amount != 10 {
		t.Fatalf("DecodeData = %v, %+v", err, p)
	}
	var wrong struct{ Amount string }
	if err := e.DecodeData(&wrong); !errors.Is(err, event.ErrInvalidPayload) || !errors.Is(err, event.ErrMalformed) {
		t.Fatalf("type mismatch err = %v", err)
	}
}

func TestToRecordValidates(t *testing.T) {
	e := mustEvent(t)
	e.ID = ""
	if _, err := event.ToRecord("t", e); !errors.Is(err, event.ErrMissingHeader) {
		t.Fatalf("err = %v", err)
	}
}

// TestFromRecordForeignProducers decodes records shaped as other teams' producers, CloudEvents
// SDKs and Debezium's outbox router write them: ids that are not UUIDs, no subject or
// correlation id, media-type parameters, and structured mode.
func TestFromRecordForeignProducers(t *testing.T) {
	ts := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	hdrs := func(kv ...string) []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	tests := []struct {
		name string
		rec  *kgo.Record
		want event.Event
	}{
		{
			name: "binary, foreign id, no subject or correlation, charset",
			rec: &kgo.Record{Key: []byte("ship-7"), Value: []byte(`{"w":1}`), Timestamp: ts, Headers: hdrs(
				"ce_specversion", "1.0", "ce_id", "A234-1234-1234", "ce_type", "com.example.shipment.created",
				"ce_source", "/shipping/eu", "content-type", "application/json; charset=utf-8")},
			want: event.Event{ID: "A234-1234-1234", Type: "com.example.shipment.created", Source: "/shipping/eu",
				Subject: "ship-7", Time: ts, SchemaVersion: 1, CorrelationID: "ship-7", Data: []byte(`{"w":1}`)},
		},
		{
			name: "binary, vendor +json type, own subject",
			rec: &kgo.Record{Key: []byte("k"), Value: []byte(`[1]`), Timestamp: ts, Headers: hdrs(
				"ce_specversion", "1.0", "ce_id", "42", "ce_type", "t", "ce_source", "s", "ce_subject", "o-1",
				"ce_time", "2026-01-02T03:04:05.5+01:00", "content-type", "application/vnd.example+json")},
			want: event.Event{ID: "42", Type: "t", Source: "s", Subject: "o-1", Time: time.Date(2026, 1, 2, 2, 4, 5, 5e8, time.UTC),
				SchemaVersion: 1, CorrelationID: "o-1", Data: []byte(`[1]`)},
		},
		{
			name: "structured, extensions as members",
			rec: &kgo.Record{Key: []byte("o-9"), Timestamp: ts, Headers: hdrs("content-type", "application/cloudevents+json; charset=UTF-8"),
				Value: []byte(`{"specversion":"1.0","id":"evt-1","type":"order.created","source":"https://shop.example/orders",
				"subject":"o-9","time":"2026-05-06T07:08:09Z","datacontenttype":"application/json",
				"correlationid":"saga-1","causationid":"evt-0","dataschemaversion":2,"data":{"amount":5}}`)},
			want: event.Event{ID: "evt-1", Type: "order.created", Source: "https://shop.example/orders", Subject: "o-9",
				Time: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC), SchemaVersion: 2, CorrelationID: "saga-1",
				CausationID: "evt-0", Data: []byte(`{"amount":5}`)},
		},
		{
			name: "structured, minimal: subject from key, no data",
			rec: &kgo.Record{Key: []byte("o-3"), Timestamp: ts, Headers: hdrs("content-type", "application/cloudevents+json"),
				Value: []byte(`{"specversion":"1.0","id":"x","type":"t","source":"s","dataschemaversion":"3"}`)},
			want: event.Event{ID: "x", Type: "t", Source: "s", Subject: "o-3", Time: ts, SchemaVersion: 3,
				CorrelationID: "o-3", Data: []byte(`null`)},
		},
		{
			name: "Debezium outbox router with CloudEvents headers (id header beside ce_*)",
			rec: &kgo.Record{Key: []byte("4711"), Value: []byte(`{"total":12}`), Timestamp: ts, Headers: hdrs(
				"id", "5d7c8f0e-0000-4000-8000-000000000001", "ce_specversion", "1.0",
				"ce_id", "5d7c8f0e-0000-4000-8000-000000000001", "ce_type", "OrderCreated", "ce_source", "debezium.inventory")},
			want: event.Event{ID: "5d7c8f0e-0000-4000-8000-000000000001", Type: "OrderCreated", Source: "debezium.inventory",
				Subject: "4711", Time: ts, SchemaVersion: 1, CorrelationID: "4711", Data: []byte(`{"total":12}`)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := event.FromRecord(tt.rec)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tt.want.ID || got.Type != tt.want.Type || got.Source != tt.want.Source || got.Subject != tt.want.Subject ||
				!got.Time.Equal(tt.want.Time) || got.SchemaVersion != tt.want.SchemaVersion || got.CorrelationID != tt.want.CorrelationID ||
				got.CausationID != tt.want.CausationID || string(got.Data) != string(tt.want.Data) {
				t.Fatalf("decoded\n%+v\nwant\n%+v", got, tt.want)
			}
			// Whatever is accepted re-encodes as choreo's binary mode and decodes the same.
			again, err := event.ToRecord("t", got)
			if err != nil {
				t.Fatal(err)
			}
			if back, err := event.FromRecord(again); err != nil || back.ID != got.ID || back.CorrelationID != got.CorrelationID {
				t.Fatalf("round trip: %+v, %v", back, err)
			}
		})
	}
}
