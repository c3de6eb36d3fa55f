package tracker

import (
	"math"
	"slices"
	"time"
)

// GapResolution bounds the error of a flow edge's P50 and P99: they are interpolated over
// the gaps' histogram buckets (eight per doubling, from 1 µs on; see schema.sql's
// gap_bucket), each gap taken at its bucket's geometric middle, so they are within this
// fraction of the percentiles of the exact gaps. A gap of zero or less counts as zero.
const GapResolution = 0.045

// gapsPerDoubling is how many histogram buckets divide each doubling of a gap.
const gapsPerDoubling = 8

// gapHistogram counts the gaps of one flow edge per bucket.
type gapHistogram map[int]int64

// bucketGap is the gap a bucket stands for: 0 for bucket 0 (zero or less), else the
// geometric middle of [2^((b-1)/8), 2^(b/8)) µs.
func bucketGap(b int) float64 {
	if b <= 0 {
		return 0
	}
	return math.Exp2((float64(b)-0.5)/gapsPerDoubling) * float64(time.Microsecond)
}

// percentile interpolates as percentile_cont does, over the gaps sorted, each taken at
// its bucket's gap.
func (h gapHistogram) percentile(p float64) time.Duration {
	buckets := make([]int, 0, len(h))
	var n int64
	for b, c := range h {
		if c > 0 {
			buckets = append(buckets, b)
			n += c
		}
	}
	if n == 0 {
		return 0
	}
	slices.Sort(buckets)
	// gapAt is the gap of rank r (0-based) in sorted order.
	gapAt := func(r int64) float64 {
		for _, b := range buckets {
			if r < h[b] {
				return bucketGap(b)
			}
			r -= h[b]
		}
		return bucketGap(buckets[len(buckets)-1])
	}
	pos := p * float64(n-1)
	lo := int64(math.Floor(pos))
	v := gapAt(lo)
	if frac := pos - float64(lo); frac > 0 {
		v += frac * (gapAt(lo+1) - v)
	}
	return time.Duration(v).Round(time.Microsecond)
}
