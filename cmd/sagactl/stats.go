package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// percentile returns the p-th percentile (0 < p <= 100) of ds by the nearest-rank method:
// the smallest value such that at least p% of the values are less than or equal to it.
// It returns 0 for no values. ds need not be sorted and is not modified.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// latencies are the p50/p95/p99 of a set of durations.
type latencies struct {
	N   int           `json:"n"`
	P50 time.Duration `json:"-"`
	P95 time.Duration `json:"-"`
	P99 time.Duration `json:"-"`
	// Milliseconds, for --json.
	P50ms float64 `json:"p50_ms"`
	P95ms float64 `json:"p95_ms"`
	P99ms float64 `json:"p99_ms"`
}

func summarize(ds []time.Duration) latencies {
	l := latencies{N: len(ds), P50: percentile(ds, 50), P95: percentile(ds, 95), P99: percentile(ds, 99)}
	l.P50ms, l.P95ms, l.P99ms = ms(l.P50), ms(l.P95), ms(l.P99)
	return l
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*10) / 10 }

// fmtDuration is the one format of a duration in sagactl's tables and the console:
// 0.4ms, 155ms, 2.5s, 42s, 4m05s, 3h02m, 2d04h (negative durations with a leading -).
func fmtDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + fmtDuration(-d)
	case d == 0:
		return "0s"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// fmtLatency is fmtDuration of a percentile over n samples, "-" for none.
func fmtLatency(d time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return fmtDuration(d)
}

// fmtAge is fmtDuration of an age, which is never negative.
func fmtAge(d time.Duration) string { return fmtDuration(max(d, 0)) }
