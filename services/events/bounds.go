package events

import (
	"errors"
	"fmt"
)

// Bounds on the saga's payloads, stated in their schemas (jsonschema struct tags:
// maxLength counts characters, maxItems lines): a payload past one is invalid
// (event.ErrInvalidPayload, so it is dead-lettered as malformed), never stored, logged
// or returned whole.
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
