package apptest

import (
	"bytes"
	"encoding/json"
	"sync"
)

// LogBuffer collects the log output of services running in process (see
// app.WithLogOutput); several goroutines may write to it at once. The zero value is
// ready to use.
type LogBuffer struct {
	mu   sync.Mutex
	text []byte
}

// Write appends p; it never fails.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.text = append(b.text, p...)
	b.mu.Unlock()
	return len(p), nil
}

// String returns all that was written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.text)
}

// Records returns the lines written so far that are JSON objects (as app's JSON
// logger writes them), decoded, in order; other lines are left out.
func (b *LogBuffer) Records() []map[string]any {
	var out []map[string]any
	for line := range bytes.Lines([]byte(b.String())) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil && rec != nil {
			out = append(out, rec)
		}
	}
	return out
}
