package main

import (
	"errors"
	"flag"
	"strconv"
	"strings"
	"time"
)

// durationValue is a flag.Value for a time.Duration that, given a bare number ("5"),
// says which unit to add instead of only that it cannot parse it.
type durationValue time.Duration

// durationVar defines a duration flag on fs, like flag.FlagSet.DurationVar.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err == nil {
		*d = durationValue(v)
		return nil
	}
	if n, nerr := strconv.ParseFloat(strings.TrimSpace(s), 64); nerr == nil && n != 0 {
		return errors.New("a duration needs a unit: " + strings.TrimSpace(s) + "m for minutes, " +
			strings.TrimSpace(s) + "s for seconds")
	}
	return errors.New(`not a duration such as "90s", "5m" or "1h30m"`)
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

// Get lets flag.PrintDefaults and callers read the value as a time.Duration.
func (d *durationValue) Get() any { return time.Duration(*d) }
