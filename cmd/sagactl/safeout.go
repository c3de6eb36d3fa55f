package main

import (
	"fmt"
	"io"
)

// safeWriter escapes control characters on their way to the operator's terminal: the
// text sagactl prints (reasons, keys, headers, payloads) comes from outside, and an ANSI
// escape in a decline reason must not recolour, move or retitle the terminal. C0 controls
// (but newline, tab and, with keepCR, carriage return), DEL and C1 controls are written
// as \u00NN, which inside a JSON string is the same character again: -json output stays
// valid and decodes to the same value (encoding/json escapes C0 controls itself, but not
// DEL or C1 controls).
type safeWriter struct {
	w      io.Writer
	keepCR bool // the progress bar redraws its line with \r
}

func (s safeWriter) Write(p []byte) (int, error) {
	clean := true
	for i := 0; i < len(p); i++ {
		if s.escape(p, i) > 0 {
			clean = false
			break
		}
	}
	if clean {
		return s.w.Write(p)
	}
	out := make([]byte, 0, len(p)+16)
	for i := 0; i < len(p); i++ {
		switch n := s.escape(p, i); n {
		case 0:
			out = append(out, p[i])
		case 1:
			out = fmt.Appendf(out, `\u%04x`, p[i])
		case 2:
			out = fmt.Appendf(out, `\u%04x`, p[i+1])
			i++
		}
	}
	if _, err := s.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// escape returns how many bytes at p[i] form a control character to escape: 0 (none),
// 1 (a C0 control or DEL) or 2 (a C1 control, U+0080 to U+009F, in UTF-8).
func (s safeWriter) escape(p []byte, i int) int {
	c := p[i]
	switch {
	case c == '\n' || c == '\t' || (c == '\r' && s.keepCR):
		return 0
	case c < 0x20 || c == 0x7f:
		return 1
	case c == 0xc2 && i+1 < len(p) && p[i+1] >= 0x80 && p[i+1] <= 0x9f:
		return 2
	}
	return 0
}
