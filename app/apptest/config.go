package apptest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/app"
)

// ParseCase is one row of a table test of a list parser, such as a service's seed
// configuration (see CheckParse).
type ParseCase[T comparable] struct {
	In      string // the text parsed; it names the subtest
	Want    []T    // the result when WantErr is empty
	WantErr string // a part of the expected error message; empty expects success
}

// CheckParse runs parse on the input of every case, in a subtest named by the input,
// and checks its result: the error containing WantErr, or no error and exactly Want.
func CheckParse[T comparable](t *testing.T, parse func(string) ([]T, error), cases []ParseCase[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.In, func(t *testing.T) {
			got, err := parse(tc.In)
			if tc.WantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.WantErr) {
					t.Fatalf("err = %v, want %q", err, tc.WantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.Want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.Want)
			}
		})
	}
}

// WantConfigError checks that env, after a LoadConfig, holds an app.ErrInvalidConfig whose
// message mentions every one of want (variable names or phrases): a configuration
// reports all its problems at once.
func WantConfigError(t testing.TB, env *app.Env, want ...string) {
	t.Helper()
	err := env.Err()
	if !errors.Is(err, app.ErrInvalidConfig) {
		t.Fatalf("err = %v, want app.ErrInvalidConfig", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not mention %s: %v", w, err)
		}
	}
}
