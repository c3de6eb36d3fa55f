package outbox

import (
	"errors"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestHeadersRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   []kgo.RecordHeader
	}{
		{"none", []kgo.RecordHeader{}},
		{"plain", []kgo.RecordHeader{{Key: "ce_id", Value: []byte("0193-abc")}, {Key: "traceparent", Value: []byte("00-aa-bb-01")}}},
		{"escapes", []kgo.RecordHeader{{Key: "q\"uote", Value: []byte("back\\slash\n\u00e9")}}},
		{"duplicate keys keep order", []kgo.RecordHeader{{Key: "k", Value: []byte("1")}, {Key: "k", Value: []byte("2")}}},
		{"empty value", []kgo.RecordHeader{{Key: "k", Value: []byte{}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			enc, err := encodeHeaders(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			// Postgres renders jsonb with a space after each comma.
			for _, form := range []string{enc, jsonbStyle(enc)} {
				got, err := decodeHeaders([]byte(form))
				if err != nil {
					t.Fatalf("decode %s: %v", form, err)
				}
				if !reflect.DeepEqual(got, tc.in) {
					t.Fatalf("decode %s: got %q, want %q", form, got, tc.in)
				}
			}
		})
	}
	if _, err := encodeHeaders([]kgo.RecordHeader{{Key: "bin", Value: []byte{0xff}}}); err == nil {
		t.Error("non-UTF-8 header value accepted")
	}
	for _, bad := range []string{"", "[", `[["a"]]`, `[["a","b"]`, `{"a":"b"}`, `[["a","b"]] x`} {
		if _, err := decodeHeaders([]byte(bad)); err == nil {
			t.Errorf("decodeHeaders(%q) succeeded", bad)
		}
	}
}

func jsonbStyle(s string) string {
	out := make([]byte, 0, len(s)+16)
	inStr := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		out = append(out, c)
		switch {
		case c == '\\' && inStr:
			i++
			out = append(out, s[i])
		case c == '"':
			inStr = !inStr
		case c == ',' && !inStr:
			out = append(out, ' ')
		}
	}
	return string(out)
}

func BenchmarkDecodeHeaders(b *testing.B) {
	enc, _ := encodeHeaders([]kgo.RecordHeader{
		{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("0193b6a2-7c1e-7d4a-9a51-2f7c3b1e9d01")},
		{Key: "ce_type", Value: []byte("order.created")}, {Key: "ce_source", Value: []byte("order")},
		{Key: "ce_subject", Value: []byte("order-1")}, {Key: "ce_time", Value: []byte("2026-11-22T02:00:00.123456Z")},
		{Key: "ce_correlationid", Value: []byte("order-1")}, {Key: "ce_dataschemaversion", Value: []byte("1")},
		{Key: "content-type", Value: []byte("application/json")}, {Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
	})
	in := []byte(jsonbStyle(enc))
	for b.Loop() {
		if _, err := decodeHeaders(in); err != nil {
			b.Fatal(err)
		}
	}
}

func TestEncodeHeadersRefusesWhatJSONBCannotStore(t *testing.T) {
	for name, v := range map[string]string{"NUL": "a\x00b", "invalid UTF-8": "\xff"} {
		t.Run(name, func(t *testing.T) {
			_, err := encodeHeaders([]kgo.RecordHeader{{Key: "baggage", Value: []byte(v)}})
			if !errors.Is(err, ErrInvalidHeader) {
				t.Fatalf("err = %v, want ErrInvalidHeader", err)
			}
		})
	}
}
