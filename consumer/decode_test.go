package consumer

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
)

func TestDecode(t *testing.T) {
	good := eventRecord(t, "orders", "order.created", "o-1", map[string]int{"qty": 2})
	tooBig := eventRecord(t, "orders", "order.created", "o-1", map[string]string{"note": "0123456789"})
	tests := []struct {
		name    string
		rec     *kgo.Record
		opts    []event.DecodeOption
		wantErr error
	}{
		{"valid", good, nil, nil},
		{"no headers", &kgo.Record{Topic: "orders", Key: []byte("o-1"), Value: []byte(`{}`)}, nil, event.ErrMalformed},
		{"bad json", &kgo.Record{Topic: "orders", Key: []byte("o-1"), Value: []byte(`{`), Headers: good.Headers}, nil, event.ErrMalformed},
		{"payload limit", tooBig, []event.DecodeOption{event.WithMaxPayloadBytes(8)}, event.ErrPayloadTooLarge},
		// Attributes Postgres cannot store in text columns (SQLSTATE 22021) are poison,
		// not a retryable failure of every transaction that stores them.
		{"NUL in ce_id", withRecordHeader(good, event.HeaderID, "e-\x00"), nil, event.ErrInvalidHeader},
		{"NUL in ce_correlationid", withRecordHeader(good, event.HeaderCorrelationID, "\x00"), nil, event.ErrInvalidHeader},
		{"invalid UTF-8 in ce_subject", withRecordHeader(good, event.HeaderSubject, "o-\xff"), nil, event.ErrInvalidHeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := false
			m := &Message{Record: tt.rec}
			d, err := cloudEvents(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			err = decodeWith(d)(func(_ context.Context, m *Message) error {
				called = true
				if !m.Decoded || m.Event.Type != "order.created" || m.Event.Subject != "o-1" || m.Subject() != "o-1" {
					t.Errorf("decoded %+v", m.Event)
				}
				return nil
			})(context.Background(), m)
			if tt.wantErr == nil {
				if err != nil || !called {
					t.Fatalf("err %v, called %v", err, called)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !errors.Is(err, event.ErrMalformed) || called || Retryable(err) {
				t.Fatalf("err %v (retryable %v), handler called %v; want non-retryable %v", err, Retryable(err), called, tt.wantErr)
			}
			if Reason(err) != ReasonMalformed {
				t.Errorf("Reason = %q", Reason(err))
			}
		})
	}
}

// withRecordHeader returns a copy of r with header key set to value.
func withRecordHeader(r *kgo.Record, key, value string) *kgo.Record {
	out := *r
	out.Headers = nil
	for _, h := range r.Headers {
		if h.Key != key {
			out.Headers = append(out.Headers, h)
		}
	}
	out.Headers = append(out.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
	return &out
}
