package tracker

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"time"
)

// Config declares the sagas the tracker follows and the topics it reads.
type Config struct {
	// Topics are the saga topics to read. The tracker also reads "<topic>.dlq" for each,
	// to join dead letters to their saga.
	Topics []string `json:"topics"`
	// Sagas are the declared sagas.
	Sagas []Saga `json:"sagas"`
}

// Saga declares one kind of saga. An event whose type matches one of Start begins a saga
// of this kind for the event's correlation id; an event matching one of Terminal ends it.
// Every type pattern is a glob as in path.Match, e.g. "stock.*".
type Saga struct {
	// Name names the kind of saga, e.g. "order".
	Name string `json:"name"`
	// Start are the type patterns that begin the saga.
	Start []string `json:"start"`
	// Terminal are the type patterns that end it.
	Terminal []string `json:"terminal"`
	// Steps are the expectations checked while the saga is in flight.
	Steps []Step `json:"steps"`
}

// Step is one expectation: after an event matching After, an event matching one of
// Expect is due within Within. When the window passes unmet and the saga has not ended,
// the saga is stuck on this step.
type Step struct {
	// Name names the step in reports; empty means After.
	Name string `json:"name,omitempty"`
	// After is the type pattern that opens the window.
	After string `json:"after"`
	// Expect are the type patterns that meet the expectation.
	Expect []string `json:"expect"`
	// Within is how long the answer may take.
	Within Duration `json:"within"`
	// Service is the service expected to answer, used when no event matching Expect has
	// been observed yet (an observed producer's source takes precedence).
	Service string `json:"service,omitempty"`
}

// Duration is a time.Duration that reads and writes JSON as a Go duration string ("30s").
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string such as "30s" or "2m".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// LoadConfig reads a JSON Config from file and validates it.
func LoadConfig(file string) (Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return Config{}, fmt.Errorf("tracker: read config: %w", err)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, file, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", file, err)
	}
	return c, nil
}

// Validate reports the first problem of c, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	if len(c.Sagas) == 0 {
		return fmt.Errorf("%w: no sagas declared", ErrInvalidConfig)
	}
	seen := map[string]bool{}
	for i, s := range c.Sagas {
		if s.Name == "" {
			return fmt.Errorf("%w: saga %d has no name", ErrInvalidConfig, i)
		}
		if seen[s.Name] {
			return fmt.Errorf("%w: saga %q declared twice", ErrInvalidConfig, s.Name)
		}
		seen[s.Name] = true
		if len(s.Start) == 0 {
			return fmt.Errorf("%w: saga %q has no start types", ErrInvalidConfig, s.Name)
		}
		pats := append(append([]string{}, s.Start...), s.Terminal...)
		for j, st := range s.Steps {
			if st.After == "" || len(st.Expect) == 0 {
				return fmt.Errorf("%w: saga %q step %d needs after and expect", ErrInvalidConfig, s.Name, j)
			}
			if st.Within <= 0 {
				return fmt.Errorf("%w: saga %q step %d: within must be positive", ErrInvalidConfig, s.Name, j)
			}
			pats = append(append(pats, st.After), st.Expect...)
		}
		for _, p := range pats {
			if _, err := path.Match(p, ""); err != nil {
				return fmt.Errorf("%w: saga %q: pattern %q: %w", ErrInvalidConfig, s.Name, p, err)
			}
		}
	}
	return nil
}

// stepName is the step's reported name.
func (s Step) stepName() string {
	if s.Name != "" {
		return s.Name
	}
	return s.After
}

// matchAny reports whether typ matches one of the (validated) patterns.
func matchAny(pats []string, typ string) bool {
	for _, p := range pats {
		if ok, _ := path.Match(p, typ); ok {
			return true
		}
	}
	return false
}
