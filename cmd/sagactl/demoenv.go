package main

import (
	"bufio"
	"os"
	"strings"
)

// demoEnvFile is where `DEMO_KEEP=1 make demo` writes the addresses of the system it
// keeps running, relative to the clone's root; the demo removes it when it stops.
const demoEnvFile = ".demo/env"

// demoEnvKeys are the settings sagactl takes from demoEnvFile: where things are, never
// credentials or security settings.
var demoEnvKeys = map[string]bool{
	"ORDER_URL":            true,
	"KAFKA_BROKERS":        true,
	"CONSOLE_ADDR":         true,
	"CONSOLE_METRICS":      true,
	"TRACKER_DATABASE_URL": true,
	"TRACKER_CONFIG":       true,
}

// withDemoEnv returns a getenv that answers from getenv first and, for the keys of
// demoEnvKeys that it leaves empty, from the KEY=value lines of file, so that sagactl run
// in a clone finds the demo that runs there without flags. Without the file (no demo
// running, or another directory) it is getenv. Lines that are empty, start with #, or
// name another key are ignored.
func withDemoEnv(getenv func(string) string, file string) func(string) string {
	f, err := os.Open(file)
	if err != nil {
		return getenv
	}
	defer f.Close()
	vals := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && demoEnvKeys[k] {
			vals[k] = v
		}
	}
	if len(vals) == 0 {
		return getenv
	}
	return func(key string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return vals[key]
	}
}
