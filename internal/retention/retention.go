// Package retention holds the one rule by which choreo's clean-ups (the idempotency
// sweeper and the dead-letter archive's pruner in app, the tracker's retention) pace
// themselves against the window they keep.
package retention

import "time"

// Interval is how often a table whose rows expire after retention is cleaned: the
// clean-up's usual pause (most), or a twentieth of the retention when that is shorter (at
// least a second), so a table holds at most a twentieth of a window of expired rows
// however short the window is set (with autovacuum at 1% dead rows, see the migrations,
// that keeps it near one window).
func Interval(retention, most time.Duration) time.Duration {
	return min(most, max(retention/20, time.Second))
}
