package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// kind is what an order placed by `sagactl load` is meant to exercise.
type kind string

const (
	kindSuccess kind = "success" // a rich customer, stocked SKUs: ends CONFIRMED
	kindDecline kind = "decline" // the poor customer: payment declines, ends REJECTED
	kindOOS     kind = "oos"     // the SKU without stock: paid, refunded, ends REJECTED
	kindCancel  kind = "cancel"  // cancelled right after placing: ends CANCELLED (or CONFIRMED if the saga won)
	kindStuck   kind = "stuck"   // the customer payment leaves hanging: stays PENDING
)

// kinds in display order.
var kinds = []kind{kindSuccess, kindDecline, kindOOS, kindCancel, kindStuck}

// defaultMix is the mix of `sagactl load` and `make demo`.
const defaultMix = "success=70,decline=10,oos=10,cancel=10,stuck=1"

// errBadMix is returned for a -mix value that cannot be parsed.
var errBadMix = errors.New("sagactl: bad -mix")

// mix says how many orders of each kind a load run places. success, decline, oos and
// cancel are relative weights (they need not add up to 100); stuck is an absolute number
// of orders, because a deliberately stuck order is a probe, not a share of the traffic.
type mix struct {
	weights map[kind]float64
	stuck   int
}

// parseMix parses "kind=value,..." (kinds: success, decline, oos, cancel, stuck). Kinds
// left out get 0. Weights are non-negative numbers, stuck a non-negative integer.
func parseMix(s string) (mix, error) {
	m := mix{weights: make(map[kind]float64)}
	seen := make(map[kind]bool)
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return mix{}, fmt.Errorf("%w: %q is not kind=value", errBadMix, part)
		}
		k := kind(strings.ToLower(strings.TrimSpace(name)))
		if !slices.Contains(kinds, k) {
			return mix{}, fmt.Errorf("%w: unknown kind %q (want success, decline, oos, cancel or stuck)", errBadMix, name)
		}
		if seen[k] {
			return mix{}, fmt.Errorf("%w: %s given twice", errBadMix, k)
		}
		seen[k] = true
		val = strings.TrimSpace(val)
		if k == kindStuck {
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return mix{}, fmt.Errorf("%w: stuck=%q must be a number of orders >= 0", errBadMix, val)
			}
			m.stuck = n
			continue
		}
		w, err := strconv.ParseFloat(val, 64)
		if err != nil || w < 0 || math.IsInf(w, 0) || math.IsNaN(w) {
			return mix{}, fmt.Errorf("%w: %s=%q must be a weight >= 0", errBadMix, k, val)
		}
		m.weights[k] = w
	}
	return m, nil
}

// String formats m the way parseMix reads it.
func (m mix) String() string {
	var parts []string
	for _, k := range kinds {
		if k == kindStuck {
			parts = append(parts, fmt.Sprintf("stuck=%d", m.stuck))
			continue
		}
		parts = append(parts, k.String()+"="+strconv.FormatFloat(m.weights[k], 'f', -1, 64))
	}
	return strings.Join(parts, ",")
}

func (k kind) String() string { return string(k) }

// counts apportions n orders: m.stuck stuck orders first, the rest over the weighted kinds
// by the largest-remainder method (ties go to the earlier kind), so the counts always add
// up to n.
func (m mix) counts(n int) (map[kind]int, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: -n must be at least 1", errBadMix)
	}
	if m.stuck > n {
		return nil, fmt.Errorf("%w: stuck=%d is more than -n %d", errBadMix, m.stuck, n)
	}
	out := map[kind]int{kindStuck: m.stuck}
	rest := n - m.stuck
	var total float64
	for _, k := range kinds {
		total += m.weights[k]
	}
	if rest > 0 && total == 0 {
		return nil, fmt.Errorf("%w: all weights are 0 but %d orders are not stuck ones", errBadMix, rest)
	}
	if rest == 0 {
		return out, nil
	}
	type share struct {
		k    kind
		frac float64
	}
	var shares []share
	given := 0
	for _, k := range kinds {
		if k == kindStuck {
			continue
		}
		exact := float64(rest) * m.weights[k] / total
		whole := int(math.Floor(exact))
		out[k] = whole
		given += whole
		shares = append(shares, share{k, exact - float64(whole)})
	}
	slices.SortStableFunc(shares, func(a, b share) int {
		switch {
		case a.frac > b.frac:
			return -1
		case a.frac < b.frac:
			return 1
		}
		return 0
	})
	for i := 0; given < rest; i++ {
		out[shares[i%len(shares)].k]++
		given++
	}
	return out, nil
}

// plan returns n kinds in a random order drawn from rng, with counts(n) of each.
func (m mix) plan(n int, rng *rand.Rand) ([]kind, error) {
	c, err := m.counts(n)
	if err != nil {
		return nil, err
	}
	out := make([]kind, 0, n)
	for _, k := range kinds {
		for range c[k] {
			out = append(out, k)
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out, nil
}
