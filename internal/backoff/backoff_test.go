package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestBound(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		want []time.Duration // Bound(1), Bound(2), ...
	}{
		{"doubles to the cap", Policy{Base: 100 * time.Millisecond, Max: 2 * time.Second},
			[]time.Duration{100e6, 200e6, 400e6, 800e6, 1600e6, 2000e6, 2000e6, 2000e6}},
		{"cap not a power of two of base", Policy{Base: 5 * time.Millisecond, Max: 12 * time.Millisecond},
			[]time.Duration{5e6, 10e6, 12e6, 12e6}},
		{"max below base is base", Policy{Base: time.Second, Max: time.Millisecond},
			[]time.Duration{1e9, 1e9}},
		{"zero policy", Policy{}, []time.Duration{1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, w := range tt.want {
				if got := tt.p.Bound(i + 1); got != w {
					t.Errorf("Bound(%d) = %v, want %v", i+1, got, w)
				}
			}
		})
	}
	p := Policy{Base: time.Millisecond, Max: time.Duration(math.MaxInt64)}
	if got := p.Bound(1000); got != p.Max {
		t.Errorf("Bound(1000) with a huge cap = %v, want the cap (no overflow)", got)
	}
	if got := p.Bound(0); got != time.Millisecond {
		t.Errorf("Bound(0) = %v, want the base", got)
	}
}

// Full jitter: every delay lies in (0, bound], and the delays are uniform over that range
// (mean at half the bound, extremes near both ends, deciles even). The check is
// statistical over a seeded generator, never about wall-clock time.
func TestDelayIsFullJitter(t *testing.T) {
	const samples = 20000
	rng := rand.New(rand.NewPCG(1, 2))
	p := Policy{Base: 10 * time.Millisecond, Max: time.Second, Rand: rng.Int64N}
	for attempt := 1; attempt <= 9; attempt++ {
		bound := p.Bound(attempt)
		var sum float64
		lo, hi := bound, time.Duration(0)
		var deciles [10]int
		for range samples {
			d := p.Delay(attempt)
			if d <= 0 || d > bound {
				t.Fatalf("attempt %d: delay %v outside (0, %v]", attempt, d, bound)
			}
			sum += float64(d)
			lo, hi = min(lo, d), max(hi, d)
			deciles[min(int(10*float64(d-1)/float64(bound)), 9)]++
		}
		mean := sum / samples / float64(bound)
		if mean < 0.47 || mean > 0.53 {
			t.Errorf("attempt %d: mean delay %.3f of the bound, want about 0.5", attempt, mean)
		}
		if float64(lo) > 0.01*float64(bound) || float64(hi) < 0.99*float64(bound) {
			t.Errorf("attempt %d: delays span [%v, %v], want nearly (0, %v]", attempt, lo, hi, bound)
		}
		for i, n := range deciles {
			if f := float64(n) / samples; f < 0.085 || f > 0.115 {
				t.Errorf("attempt %d: decile %d holds %.3f of the delays, want about 0.1", attempt, i, f)
			}
		}
	}
}

// The extremes of the random source map to the extremes of the interval.
func TestDelayExtremes(t *testing.T) {
	p := Policy{Base: 8, Max: 64}
	p.Rand = func(int64) int64 { return 0 }
	if d := p.Delay(3); d != 1 {
		t.Errorf("lowest draw: %v, want 1ns", d)
	}
	p.Rand = func(n int64) int64 { return n - 1 }
	if d := p.Delay(3); d != 32 {
		t.Errorf("highest draw: %v, want the bound 32ns", d)
	}
	if d := (Policy{}).Delay(1); d != 1 {
		t.Errorf("zero policy: %v, want 1ns", d)
	}
}

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Microsecond, nil) {
		t.Error("Sleep of 1µs did not report elapsed")
	}
	stop := make(chan struct{})
	close(stop)
	if Sleep(context.Background(), time.Hour, stop) {
		t.Error("Sleep ignored a closed stop channel")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour, nil) {
		t.Error("Sleep ignored a cancelled context")
	}
}
