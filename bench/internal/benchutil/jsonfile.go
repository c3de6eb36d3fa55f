package benchutil

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// MergeJSON sets key to v in the JSON object in file (created if missing), keeping the
// other keys and their order: each benchmark writes its own key of bench/results.json.
func MergeJSON(file, key string, v any) error {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		b = []byte("{}")
	} else if err != nil {
		return err
	}
	val, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("%s: not a JSON object", file)
	}
	var out bytes.Buffer
	out.WriteByte('{')
	member := func(k string, raw []byte) {
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		out.Write(kb)
		out.WriteByte(':')
		out.Write(raw)
	}
	set := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		k, _ := tok.(string)
		if k == key {
			raw, set = val, true
		}
		member(k, raw)
	}
	if !set {
		member(key, val)
	}
	out.WriteByte('}')
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, out.Bytes(), "", "  "); err != nil {
		return err
	}
	pretty.WriteByte('\n')
	return os.WriteFile(file, pretty.Bytes(), 0o644)
}
