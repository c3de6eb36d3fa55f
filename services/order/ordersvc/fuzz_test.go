package ordersvc

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeCreateRequest feeds arbitrary bodies to the decoding of POST /orders
// (decodeBody, then CreateRequest.Validate, as handleCreate runs them) and checks that it
// never panics, answers only 0, 400 or 413 with a short message that echoes no raw
// control bytes, and that a request it accepts survives a JSON round trip unchanged.
// make fuzz runs it.
func FuzzDecodeCreateRequest(f *testing.F) {
	for _, s := range []string{
		`{"customer_id":"c-1","items":[{"sku":"sku-1","qty":2}],"amount":1999}`,
		`{"customer_id":"c-1","items":[{"sku":"sku-1","qty":2},{"sku":"sku-1","qty":1}],"amount":1}`,
		`{"customer_id":"c-1","items":[],"amount":1}{}`,
		`{"customer_id":1}`,
		`{"customer_id":"\u001b[31m","items":[{"sku":"a","qty":1e3}],"amount":-1}`,
		`{"unknown":true}`,
		`[1,2,3]`,
		`"x"`,
		`{"customer_id":"c","items":[{"sku":"s","qty":1}],"amount":100000000001}`,
		`{"customer_id":"c","items":null,"amount":9223372036854775808}`,
		``,
		`{`,
		strings.Repeat(`[`, 10000),
		`{"customer_id":"` + strings.Repeat("a", MaxBodyBytes) + `"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/orders", bytes.NewReader(body))
		var req CreateRequest
		status, msg := decodeBody(w, r, &req)
		switch status {
		case 0:
			if msg != "" {
				t.Fatalf("accepted with message %q", msg)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if msg == "" || len(msg) > 512 {
				t.Fatalf("status %d with a message of %d bytes: %q", status, len(msg), msg)
			}
			if !utf8.ValidString(msg) || strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Fatalf("message %q holds control bytes or invalid UTF-8", msg)
			}
			if status == http.StatusRequestEntityTooLarge && len(body) <= MaxBodyBytes {
				t.Fatalf("413 for a body of %d bytes", len(body))
			}
			return
		default:
			t.Fatalf("status %d (%q)", status, msg)
		}
		if len(body) > MaxBodyBytes {
			t.Fatalf("accepted a body of %d bytes (limit %d)", len(body), MaxBodyBytes)
		}
		if err := req.Validate(); err != nil {
			if !strings.HasPrefix(err.Error(), ErrInvalidRequest.Error()) {
				t.Fatalf("Validate: %v does not wrap ErrInvalidRequest", err)
			}
			return
		}
		// A valid request is what the service stores and hashes for idempotency: it must
		// encode and decode back to itself.
		enc, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("marshal valid request: %v", err)
		}
		var back CreateRequest
		status, msg = decodeBody(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/orders", bytes.NewReader(enc)), &back)
		if status != 0 {
			t.Fatalf("re-encoded valid request %s refused: %d %s", enc, status, msg)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("re-encoded valid request %s invalid: %v", enc, err)
		}
		enc2, _ := json.Marshal(back)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip changed the request: %s -> %s", enc, enc2)
		}
	})
}
