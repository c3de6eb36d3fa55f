package events

import (
	"errors"
	"fmt"

	"github.com/choreo-saga/choreo/event"
)

// Bounds on the saga's payloads: a payload past one is invalid (event.ErrInvalidPayload,
// so it is dead-lettered as malformed), never stored, logged or returned whole.
const (
	// MaxIDBytes bounds order, customer and SKU ids, and the event subject.
	MaxIDBytes = 128
	// MaxReasonBytes bounds a reason (a decline, a cancellation, a rejection).
	MaxReasonBytes = 256
	// MaxItems bounds the lines of one order.
	MaxItems = 100
)

// ValidSubject reports whether s can be an order id, the subject of every saga event:
// 1 to MaxIDBytes bytes of letters, digits, '-', '_', '.' and ':', not starting with
// '.'. It rejects what could escape a key prefix or a path ("../../etc", "a/b", control
// characters) before a lock or fence key is made from it.
func ValidSubject(s string) error {
	if s == "" || len(s) > MaxIDBytes {
		return fmt.Errorf("must be 1 to %d bytes", MaxIDBytes)
	}
	if s[0] == '.' {
		return errors.New("must not start with '.'")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return fmt.Errorf("byte %d (%q) is not a letter, digit, '-', '_', '.' or ':'", i, c)
		}
	}
	return nil
}

// checkBounds reports the first string field of p past its bound.
func checkBounds(p Payload) error {
	var ids []struct{ name, v string }
	var reason string
	var items []Item
	switch p := p.(type) {
	case OrderCreatedV1:
		ids, items = append(ids, struct{ name, v string }{"customer_id", p.CustomerID}), p.Items
	case OrderCancelRequestedV1:
		reason = p.Reason
	case OrderOutcomeV1:
		reason = p.Reason
	case PaymentV1:
		ids, items, reason = append(ids, struct{ name, v string }{"customer_id", p.CustomerID}), p.Items, p.Reason
	case StockV1:
		items, reason = p.Items, p.Reason
	}
	ids = append(ids, struct{ name, v string }{"order_id", p.Subject()})
	for _, id := range ids {
		if len(id.v) > MaxIDBytes {
			return fmt.Errorf("%s is %d bytes, limit %d", id.name, len(id.v), MaxIDBytes)
		}
	}
	if len(reason) > MaxReasonBytes {
		return fmt.Errorf("reason is %d bytes, limit %d", len(reason), MaxReasonBytes)
	}
	if len(items) > MaxItems {
		return fmt.Errorf("%d items, limit %d", len(items), MaxItems)
	}
	for i, it := range items {
		if len(it.SKU) > MaxIDBytes {
			return fmt.Errorf("items[%d].sku is %d bytes, limit %d", i, len(it.SKU), MaxIDBytes)
		}
	}
	return nil
}

// boundsError wraps a bound violation of an event of type typ as an invalid payload.
func boundsError(typ string, err error) error {
	return fmt.Errorf("%s: %w", typ, &event.Error{Field: "data", Kind: event.ErrInvalidPayload, Detail: err.Error()})
}

// clip shortens untrusted text quoted in an error.
func clip(s string) string {
	if len(s) > MaxIDBytes {
		return s[:MaxIDBytes] + "…"
	}
	return s
}
