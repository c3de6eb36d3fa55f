package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/event"
	"github.com/twmb/franz-go/pkg/kgo"
)

func mustEvent(t *testing.T) event.Event {
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
		{"bad uuid", withHeader(good, event.HeaderID, []byte("not-a-uuid")), nil, event.ErrInvalidHeader, "not a UUID"},
		{"no type", withHeader(good, event.HeaderType, nil), nil, event.ErrMissingHeader, "type"},
		{"no source", withHeader(good, event.HeaderSource, nil), nil, event.ErrMissingHeader, "source"},
		{"no subject", withHeader(good, event.HeaderSubject, nil), nil, event.ErrMissingHeader, "subject"},
		{"no correlation", withHeader(good, event.HeaderCorrelationID, nil), nil, event.ErrMissingHeader, "correlationid"},
		{"long type", withHeader(good, event.HeaderType, bytes.Repeat([]byte("x"), 256)), nil, event.ErrInvalidHeader, "limit 255"},
		{"bad time", withHeader(good, event.HeaderTime, []byte("yesterday")), nil, event.ErrInvalidHeader, "RFC 3339"},
		{"bad schema version", withHeader(good, event.HeaderSchemaVersion, []byte("v2")), nil, event.ErrInvalidHeader, "not an integer"},
		{"zero schema version", withHeader(good, event.HeaderSchemaVersion, []byte("0")), nil, event.ErrInvalidHeader, ">= 1"},
		{"wrong content type", withHeader(good, event.HeaderContentType, []byte("text/plain")), nil, event.ErrInvalidHeader, "text/plain"},
		{"invalid json", withValue([]byte(`{"amount":`)), nil, event.ErrInvalidPayload, "JSON"},
		{"empty payload", withValue(nil), nil, event.ErrInvalidPayload, "JSON"},
		{"too large default", withValue([]byte(`"` + strings.Repeat("a", event.DefaultMaxPayloadBytes) + `"`)), nil, event.ErrPayloadTooLarge, "limit 1048576"},
		{"too large configured", withValue([]byte(`"0123456789"`)), []event.DecodeOption{event.MaxPayloadBytes(8)}, event.ErrPayloadTooLarge, "12 bytes, limit 8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := event.FromRecord(tt.rec, tt.opts...)
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
	e.ID = "42"
	if _, err := event.ToRecord("t", e); !errors.Is(err, event.ErrInvalidHeader) {
		t.Fatalf("err = %v", err)
	}
}
