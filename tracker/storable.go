package tracker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds of the text the tracker stores from a record's headers. Every text column fed
// from the wire goes through storable, so a record can neither make Postgres refuse the
// row (NUL, invalid UTF-8) nor exceed an index entry's size (a B-tree entry holds about
// 2.7 kB): either would stop the tracker on that record for good.
const (
	// MaxFieldBytes bounds an id, type, source, subject or reason the tracker stores.
	MaxFieldBytes = 256
	// MaxErrorBytes bounds the dead-letter error text it stores.
	MaxErrorBytes = 4096
)

// storable returns s as the tracker stores it, and whether that differs from s: NUL and
// every byte that is not part of valid UTF-8 written as \xNN, and a result longer than
// max bytes cut on a rune boundary and ended with "…" and the first 16 hex digits of
// s's SHA-256, so that two long values that differ stay apart.
func storable(s string, max int) (string, bool) {
	out := s
	if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
		var b strings.Builder
		for i := 0; i < len(s); {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == 0 || r == utf8.RuneError && n == 1 {
				fmt.Fprintf(&b, `\x%02x`, s[i])
			} else {
				b.WriteString(s[i : i+n])
			}
			i += n
		}
		out = b.String()
	}
	if len(out) > max {
		sum := sha256.Sum256([]byte(s))
		tail := "…" + hex.EncodeToString(sum[:8])
		cut := max - len(tail)
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = out[:cut] + tail
	}
	return out, out != s
}

// isHex reports whether s is lower- or upper-case hexadecimal.
func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// storableTime reports whether Postgres' timestamptz and the tracker's arithmetic take
// t: years 1 to 9999. A record's timestamp is any 64-bit number of milliseconds.
func storableTime(t time.Time) bool {
	return t.Year() >= 1 && t.Year() <= 9999
}
