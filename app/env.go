package app

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
)

// Env reads configuration from environment variables. Each getter returns the variable's
// value, or the default when the variable is unset or empty; a value that does not parse
// is reported, the default is returned, and reading goes on, so that [Env.Err] can list
// every problem at once instead of making the operator fix them one start at a time.
//
//	env := app.NewEnv(nil)
//	rate := env.Float64("PAYMENT_FAILURE_RATE", 0)
//	env.Check("PAYMENT_FAILURE_RATE", rate >= 0 && rate <= 1, "must be between 0 and 1")
//	if err := env.Err(); err != nil { ... }
//
// An Env is not safe for concurrent use; read the configuration once, at start.
type Env struct {
	lookup func(string) (string, bool)
	errs   []error
}

// NewEnv returns an Env reading through lookup; nil means os.LookupEnv.
func NewEnv(lookup func(key string) (string, bool)) *Env {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	return &Env{lookup: lookup}
}

// MapEnv returns an Env reading from m, for tests and embedded configuration.
func MapEnv(m map[string]string) *Env {
	return NewEnv(func(k string) (string, bool) { v, ok := m[k]; return v, ok })
}

// raw returns the trimmed value of key and whether it is set and not blank.
func (e *Env) raw(key string) (string, bool) {
	v, ok := e.lookup(key)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

// Fail records a problem with key; [Env.Err] reports it. The message quotes the
// variable's value unless its name suggests a secret (it ends in _URL, _DSN, _PASSWORD,
// _SECRET, _TOKEN or _KEY): connection strings carry passwords.
func (e *Env) Fail(key string, reason string) {
	if v, ok := e.raw(key); ok && !secretKey(key) {
		e.errs = append(e.errs, fmt.Errorf("%w: %s=%q: %s", ErrInvalidConfig, key, v, reason))
		return
	}
	e.errs = append(e.errs, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, key, reason))
}

func secretKey(key string) bool {
	k := strings.ToUpper(key)
	for _, suffix := range []string{"_URL", "_DSN", "_PASSWORD", "_SECRET", "_TOKEN", "_KEY"} {
		if strings.HasSuffix(k, suffix) {
			return true
		}
	}
	return false
}

// Check records reason as a problem with key unless ok holds, for validation beyond
// parsing (ranges, relations between variables).
func (e *Env) Check(key string, ok bool, reason string) {
	if !ok {
		e.Fail(key, reason)
	}
}

// Err returns every problem recorded so far joined into one error (each matches
// [ErrInvalidConfig]), or nil.
func (e *Env) Err() error { return errors.Join(e.errs...) }

// String returns the value of key, or def.
func (e *Env) String(key, def string) string {
	if v, ok := e.raw(key); ok {
		return v
	}
	return def
}

// Required returns the value of key and records a problem if it is unset or blank.
func (e *Env) Required(key string) string {
	v, ok := e.raw(key)
	if !ok {
		e.Fail(key, "required but not set")
	}
	return v
}

// Int returns the value of key as a decimal integer, or def.
func (e *Env) Int(key string, def int) int {
	v, ok := e.raw(key)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.Fail(key, "not an integer")
		return def
	}
	return n
}

// Int64 returns the value of key as a decimal 64-bit integer, or def.
func (e *Env) Int64(key string, def int64) int64 {
	v, ok := e.raw(key)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		e.Fail(key, "not a 64-bit integer")
		return def
	}
	return n
}

// Float64 returns the value of key as a finite floating-point number, or def.
func (e *Env) Float64(key string, def float64) float64 {
	v, ok := e.raw(key)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f != f || f > 1e300 || f < -1e300 {
		e.Fail(key, "not a finite number")
		return def
	}
	return f
}

// Bool returns the value of key as a boolean (1/0, t/f, true/false, yes/no, on/off), or def.
func (e *Env) Bool(key string, def bool) bool {
	v, ok := e.raw(key)
	if !ok {
		return def
	}
	switch strings.ToLower(v) {
	case "1", "t", "true", "yes", "y", "on":
		return true
	case "0", "f", "false", "no", "n", "off":
		return false
	}
	e.Fail(key, "not a boolean (true/false)")
	return def
}

// Duration returns the value of key as a Go duration ("250ms", "1m30s"), or def.
// Negative durations are rejected.
func (e *Env) Duration(key string, def time.Duration) time.Duration {
	v, ok := e.raw(key)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.Fail(key, `not a duration (e.g. "250ms", "5s", "1m")`)
		return def
	}
	if d < 0 {
		e.Fail(key, "must not be negative")
		return def
	}
	return d
}

// List returns the comma-separated value of key with blank elements dropped, or def.
func (e *Env) List(key string, def []string) []string {
	v, ok := e.raw(key)
	if !ok {
		return append([]string(nil), def...)
	}
	var out []string
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return append([]string(nil), def...)
	}
	return out
}

// Level returns the value of key as a log level (debug, info, warn, error, or an offset
// such as "info+2"), or def.
func (e *Env) Level(key string, def slog.Level) slog.Level {
	v, ok := e.raw(key)
	if !ok {
		return def
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		e.Fail(key, "not a log level (debug, info, warn, error)")
		return def
	}
	return l
}
