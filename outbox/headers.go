package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
)

// Headers are stored in the row's jsonb column: encodeHeaders writes them (in
// Enqueue), decodeHeaders reads them back (in the relay, for every row).

// encodeHeaders renders record headers as a JSON array of [key, value] pairs,
// which keeps their order and duplicates and stays readable for operators.
func encodeHeaders(hs []kgo.RecordHeader) (string, error) {
	pairs := make([][2]string, len(hs))
	for i, h := range hs {
		if !utf8.Valid(h.Value) || bytes.IndexByte(h.Value, 0) >= 0 {
			return "", fmt.Errorf("%w: %q", ErrInvalidHeader, h.Key)
		}
		pairs[i] = [2]string{h.Key, string(h.Value)}
	}
	b, err := json.Marshal(pairs)
	if err != nil {
		return "", fmt.Errorf("outbox: encode headers: %w", err)
	}
	return string(b), nil
}

// decodeHeaders parses what encodeHeaders stored (as Postgres renders jsonb:
// [["k", "v"], ...]). The relay decodes every row it publishes, so the common
// case (strings without escapes) is parsed by hand; anything else goes
// through encoding/json.
func decodeHeaders(b []byte) ([]kgo.RecordHeader, error) {
	if hs, ok := parseHeaders(b); ok {
		return hs, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(b, &pairs); err != nil {
		return nil, fmt.Errorf("outbox: decode headers: %w", err)
	}
	hs := make([]kgo.RecordHeader, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("outbox: decode headers: entry %d has %d elements, want 2", i, len(p))
		}
		hs[i] = kgo.RecordHeader{Key: p[0], Value: []byte(p[1])}
	}
	return hs, nil
}

// parseHeaders is the fast path of decodeHeaders; ok is false for input it
// does not handle (escapes, unexpected shape), which the slow path then
// decodes or rejects.
func parseHeaders(in []byte) (hs []kgo.RecordHeader, ok bool) {
	b := append([]byte(nil), in...) // values alias this one copy
	i := 0
	skip := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
			i++
		}
	}
	expect := func(c byte) bool {
		skip()
		if i < len(b) && b[i] == c {
			i++
			return true
		}
		return false
	}
	str := func() ([]byte, bool) {
		skip()
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		start := i + 1
		for j := start; j < len(b); j++ {
			switch b[j] {
			case '\\':
				return nil, false
			case '"':
				i = j + 1
				return b[start:j], true
			}
		}
		return nil, false
	}
	if !expect('[') {
		return nil, false
	}
	hs = make([]kgo.RecordHeader, 0, 12)
	if expect(']') {
		return hs, true
	}
	for {
		if !expect('[') {
			return nil, false
		}
		k, ok1 := str()
		if !ok1 || !expect(',') {
			return nil, false
		}
		v, ok2 := str()
		if !ok2 || !expect(']') {
			return nil, false
		}
		hs = append(hs, kgo.RecordHeader{Key: headerKey(k), Value: v[:len(v):len(v)]})
		if expect(']') {
			skip()
			return hs, i == len(b)
		}
		if !expect(',') {
			return nil, false
		}
	}
}

// knownHeaderKeys interns the header names every row carries.
var knownHeaderKeys = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{event.HeaderID, event.HeaderType, event.HeaderSource, event.HeaderSpecVersion,
		event.HeaderTime, event.HeaderSubject, event.HeaderCorrelationID, event.HeaderCausationID,
		event.HeaderSchemaVersion, event.HeaderContentType, "traceparent", "tracestate", "baggage"} {
		m[k] = k
	}
	return m
}()

// headerKey returns the key as a string, without allocating for the known
// header names (a map lookup by string(k) does not allocate).
func headerKey(k []byte) string {
	if s, ok := knownHeaderKeys[string(k)]; ok {
		return s
	}
	return string(k)
}
