package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
)

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// Name returns a short name unique to this call, made of prefix, a sanitised piece of the
// test's name and random hex, usable as a database, topic, group or key namespace name.
func Name(t testing.TB, prefix string) string {
	t.Helper()
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("testenv: random name: %v", err)
	}
	base := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(base) > 24 {
		base = base[len(base)-24:]
	}
	return strings.Trim(prefix+"_"+base, "_") + "_" + hex.EncodeToString(b)
}

// need fails the test with one clear message when a service is missing: what is missing,
// how to start it, and the environment variable that points the tests at another one.
func need(t testing.TB, service string, err error, howto string) {
	t.Helper()
	t.Fatalf("testenv: no %s for tests: %v\n  start one with: %s\n  or point the tests at one with the environment variable shown above", service, err, howto)
}
