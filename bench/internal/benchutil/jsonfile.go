package benchutil

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// MergeJSON sets key in the JSON object stored at path to v (indented), keeping the
// object's other keys: each benchmark writes its own key of bench/results.json. A
// missing file starts an empty object.
func MergeJSON(path, key string, v any) error {
	obj := map[string]json.RawMessage{}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(b, &obj); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	val, err := json.Marshal(v)
	if err != nil {
		return err
	}
	obj[key] = val
	out, err := json.MarshalIndent(obj, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(out, '\n'), 0o644)
}
