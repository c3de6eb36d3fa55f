package event_test

import (
	"errors"
	"testing"

	"github.com/choreo-saga/choreo/event"
	"github.com/twmb/franz-go/pkg/kgo"
)

// FuzzFromRecord feeds arbitrary header values and payloads to the decoder. The decoder must
// never panic, every error must match ErrMalformed, and whatever it accepts must re-encode
// and decode to the same event. The seed corpus runs in every `go test`; explore with
// `go test ./event -fuzz FuzzFromRecord`.
func FuzzFromRecord(f *testing.F) {
	good, err := event.New("order", "order.created", "o-1", map[string]int{"amount": 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("1.0", good.ID, "order.created", "order", "o-1", "o-1", "", "2026-01-02T03:04:05Z", "1", []byte(`{"amount":1}`))
	f.Add("1.0", good.ID, "t", "s", "k", "c", good.ID, "", "", []byte(`null`))
	f.Add("0.3", "x", "", "", "", "", "", "bad", "-1", []byte(`{`))
	f.Add("1.0", good.ID, "t", "s", "k", "c", "", "2026-13-99T00:00:00Z", "99999999999999999999", []byte("\xff"))
	f.Fuzz(func(t *testing.T, spec, id, typ, source, subject, corr, cause, ts, version string, value []byte) {
		rec := &kgo.Record{Key: []byte(subject), Value: value}
		for _, h := range [][2]string{
			{event.HeaderSpecVersion, spec}, {event.HeaderID, id}, {event.HeaderType, typ},
			{event.HeaderSource, source}, {event.HeaderSubject, subject}, {event.HeaderCorrelationID, corr},
			{event.HeaderCausationID, cause}, {event.HeaderTime, ts}, {event.HeaderSchemaVersion, version},
		} {
			if h[1] != "" {
				rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h[0], Value: []byte(h[1])})
			}
		}
		e, err := fuzzDecoder.Decode(rec)
		if err != nil {
			if !errors.Is(err, event.ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			return
		}
		again, err := event.ToRecord("t", e)
		if err != nil {
			t.Fatalf("accepted event does not re-encode: %v", err)
		}
		e2, err := event.FromRecord(again)
		if err != nil {
			t.Fatalf("re-encoded event does not decode: %v", err)
		}
		if e2.ID != e.ID || e2.Type != e.Type || e2.Subject != e.Subject || e2.CorrelationID != e.CorrelationID ||
			e2.CausationID != e.CausationID || e2.SchemaVersion != e.SchemaVersion || !e2.Time.Equal(e.Time) || string(e2.Data) != string(e.Data) {
			t.Fatalf("round trip changed the event:\n%+v\n%+v", e, e2)
		}
	})
}

// FuzzFromStructuredRecord feeds arbitrary values to the structured-mode decoder (content
// type application/cloudevents+json), under the same rules as FuzzFromRecord.
func FuzzFromStructuredRecord(f *testing.F) {
	f.Add([]byte("k"), []byte(`{"specversion":"1.0","id":"a","type":"t","source":"s","data":{"x":1}}`))
	f.Add([]byte(""), []byte(`{"specversion":"1.0","id":"a","type":"t","source":"s","subject":"o","correlationid":"c","causationid":"b","dataschemaversion":"7","time":"2026-01-02T03:04:05Z"}`))
	f.Add([]byte("k"), []byte(`{"specversion":"1.0","id":1,"dataschemaversion":1e99,"data_base64":"AA=="}`))
	f.Add([]byte("k"), []byte(`{"specversion":"1.0","id":"a","type":"t","source":"s","datacontenttype":"text/plain; x","data":"\u0000"}`))
	f.Add([]byte("k"), []byte(`[`))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		rec := &kgo.Record{Key: key, Value: value, Headers: []kgo.RecordHeader{
			{Key: event.HeaderContentType, Value: []byte("application/cloudevents+json")},
		}}
		e, err := fuzzDecoder.Decode(rec)
		if err != nil {
			if !errors.Is(err, event.ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			return
		}
		again, err := event.ToRecord("t", e)
		if err != nil {
			t.Fatalf("accepted event does not re-encode: %v", err)
		}
		e2, err := event.FromRecord(again)
		if err != nil {
			t.Fatalf("re-encoded event does not decode: %v", err)
		}
		if e2.ID != e.ID || e2.Subject != e.Subject || e2.CorrelationID != e.CorrelationID || e2.SchemaVersion != e.SchemaVersion {
			t.Fatalf("round trip changed the event:\n%+v\n%+v", e, e2)
		}
	})
}

// fuzzDecoder is the decoder of the fuzz tests: a small payload limit, so that the limit
// is reached too.
var fuzzDecoder, _ = event.NewDecoder(event.WithMaxPayloadBytes(4096))
