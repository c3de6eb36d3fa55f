package main

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// The console shows text from outside (reasons, keys, headers, payloads, error
// messages) in a browser, where a bidi override (U+202E) or another format character
// shows text in another order than it is, as on a terminal (safeout.go). Every answer
// that carries such text goes through one of these before it is written.

// visibleMarkup returns the rendered page or image b with every unsafeRune but newline,
// carriage return and tab (the markup's own layout) written as \uNNNN. A page has no
// script or style of its own inline (the CSP forbids them), so no context decodes the
// escape back: it shows as the six characters it is.
func visibleMarkup(b []byte) []byte {
	i := 0
	for i < len(b) {
		r, size := utf8.DecodeRune(b[i:])
		if markupUnsafe(r, size) {
			break
		}
		i += size
	}
	if i == len(b) {
		return b
	}
	out := append(make([]byte, 0, len(b)+16), b[:i]...)
	for i < len(b) {
		r, size := utf8.DecodeRune(b[i:])
		if markupUnsafe(r, size) {
			out = appendEscaped(out, r)
		} else {
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	return out
}

func markupUnsafe(r rune, size int) bool {
	return size > 0 && !(r == utf8.RuneError && size == 1) && r != '\n' && r != '\r' && r != '\t' && unsafeRune(r)
}

// visibleJSON encodes v with every string in it (keys too) passed through safeText, so a
// page that writes the values with textContent shows \u202e, never the character.
func visibleJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var tree any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // numbers pass as they are
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	b, err := json.Marshal(visibleTree(tree))
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func visibleTree(v any) any {
	switch t := v.(type) {
	case string:
		return safeText(t)
	case []any:
		for i := range t {
			t[i] = visibleTree(t[i])
		}
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[safeText(k)] = visibleTree(x)
		}
		return out
	}
	return v
}
