package main

import (
	"fmt"
	"io"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Text sagactl prints comes from outside: reasons, keys, headers and payloads from Kafka
// and the order API. Written to a terminal as it is, an ANSI escape in a decline reason
// recolours, moves or retitles the terminal, a newline in a record key adds a fake row to
// a table, and a bidi override (U+202E) shows text in another order than it is. Two
// layers keep them out:
//
//   - safeText escapes every such character of one field: the renderers pass every
//     outside value through it (printf does for its arguments, table.add for its cells);
//   - safeWriter, around stdout and stderr, escapes what no field should ever bring, in
//     whatever is written: C0 controls but newline and tab (and carriage return on
//     stderr, where the progress bar redraws its line), DEL, C1 controls and the bidi,
//     zero-width and other format characters.
//
// Both write a character as \uNNNN (a pair of them, UTF-16 surrogates, above U+FFFF),
// which inside a JSON string is the same character again: -json output stays valid and
// decodes to the same value (encoding/json escapes C0 controls itself, but not DEL, C1
// controls or U+202E).

// unsafeRune reports whether r must not reach the terminal as it is: a C0 or C1 control,
// DEL, or a format character (unicode.Cf: the bidi embeddings, overrides, isolates and
// marks U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069, the zero-width U+200B–U+200D
// and U+FEFF, ...), a line or a paragraph separator.
func unsafeRune(r rune) bool {
	return r < 0x20 || (r >= 0x7f && r <= 0x9f) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// appendEscaped appends r as \uNNNN, or as a surrogate pair of them above U+FFFF.
func appendEscaped(b []byte, r rune) []byte {
	if r > 0xffff {
		r1, r2 := utf16.EncodeRune(r)
		return fmt.Appendf(b, `\u%04x\u%04x`, r1, r2)
	}
	return fmt.Appendf(b, `\u%04x`, r)
}

// safeText returns s with every unsafeRune escaped (newline, carriage return and tab
// included: a field stays on its line) and every byte of invalid UTF-8 written as \xNN.
func safeText(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	out := make([]byte, 0, len(s)+16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			out = fmt.Appendf(out, `\x%02x`, s[i])
		case unsafeRune(r):
			out = appendEscaped(out, r)
		default:
			out = append(out, s[i:i+size]...)
		}
		i += size
	}
	return string(out)
}

// printf is fmt.Fprintf with every string, []byte and error argument passed through
// safeText: the format is sagactl's own, the values come from outside.
func printf(w io.Writer, format string, args ...any) (int, error) {
	for i, a := range args {
		switch v := a.(type) {
		case string:
			args[i] = safeText(v)
		case []byte:
			args[i] = safeText(string(v))
		case error:
			args[i] = safeText(v.Error())
		}
	}
	return fmt.Fprintf(w, format, args...)
}

// safeWriter is the second layer: it escapes the unsafe characters no field should
// bring, in whatever sagactl writes to w.
type safeWriter struct {
	w      io.Writer
	keepCR bool // the progress bar redraws its line with \r
}

func (s safeWriter) Write(p []byte) (int, error) {
	clean := true
	for i := 0; i < len(p); {
		_, size, esc := s.escape(p[i:])
		if esc {
			clean = false
			break
		}
		i += size
	}
	if clean {
		return s.w.Write(p)
	}
	out := make([]byte, 0, len(p)+16)
	for i := 0; i < len(p); {
		r, size, esc := s.escape(p[i:])
		if esc {
			out = appendEscaped(out, r)
		} else {
			out = append(out, p[i:i+size]...)
		}
		i += size
	}
	if _, err := s.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// escape decodes the character at the start of p and reports its size and whether to
// escape it: every unsafeRune but newline, tab and, with keepCR, carriage return. Invalid
// UTF-8 passes byte by byte.
func (s safeWriter) escape(p []byte) (rune, int, bool) {
	c := p[0]
	if c < utf8.RuneSelf {
		keep := c == '\n' || c == '\t' || (c == '\r' && s.keepCR)
		return rune(c), 1, !keep && unsafeRune(rune(c))
	}
	r, size := utf8.DecodeRune(p)
	if r == utf8.RuneError && size == 1 {
		return r, 1, false
	}
	return r, size, unsafeRune(r)
}
