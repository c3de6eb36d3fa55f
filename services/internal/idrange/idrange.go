// Package idrange expands the id ranges of the demo services' seed lists
// ("c-1..c-100" in PAYMENT_CUSTOMERS or INVENTORY_STOCK). It is shared by the
// services only, so it lives under services/, not in the library's app package.
package idrange

import (
	"fmt"
	"strconv"
	"strings"
)

// Expand expands an id range written "c-1..c-100" (or "c-1..100") into c-1, c-2, …,
// c-100, for seed lists in configuration. Any other non-empty id is returned as is. Both
// ends need a numeric suffix and the same prefix; ranges over a million ids are refused.
func Expand(s string) ([]string, error) {
	from, to, ok := strings.Cut(s, "..")
	if !ok {
		if s == "" {
			return nil, fmt.Errorf("empty id")
		}
		return []string{s}, nil
	}
	prefix, lo, err := splitNumber(from)
	if err != nil {
		return nil, err
	}
	toPrefix, hi, err := splitNumber(to)
	if err != nil {
		return nil, err
	}
	if toPrefix != "" && toPrefix != prefix {
		return nil, fmt.Errorf("range %q: both ends need the same prefix", s)
	}
	if hi < lo || hi-lo >= 1_000_000 {
		return nil, fmt.Errorf("range %q: empty or larger than a million ids", s)
	}
	ids := make([]string, 0, hi-lo+1)
	for n := lo; n <= hi; n++ {
		ids = append(ids, prefix+strconv.Itoa(n))
	}
	return ids, nil
}

// splitNumber splits "c-12" into "c-" and 12.
func splitNumber(s string) (string, int, error) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	if i == len(s) {
		return "", 0, fmt.Errorf("range end %q has no numeric suffix", s)
	}
	n, err := strconv.Atoi(s[i:])
	if err != nil {
		return "", 0, fmt.Errorf("range end %q: %w", s, err)
	}
	return s[:i], n, nil
}
