package main

import (
	"strings"
	"testing"
	"time"
)

// TestJudge: the size of a table with a retention the soak shortens is judged against
// its size when the window was first reached; a table that grows with the orders by
// design is reported per order, not judged; RSS slopes and confirmed ÷ offered are
// judged from the samples.
func TestJudge(t *testing.T) {
	c := config{duration: 10 * time.Minute, retention: 2 * time.Minute, warmup: time.Minute}
	var r results
	for i := range 11 {
		grow := int64(i) * 1000
		r.Samples = append(r.Samples, sample{
			T:      float64(i * 60),
			RSSMiB: map[string]float64{"order": 100 + float64(i)}, // 6 MiB/h
			Tables: map[string]tableSample{
				"order.choreo_idempotency": {Bytes: 8192 + min(grow, 2000)}, // levels off at the window
				"order.choreo_outbox":      {Bytes: 8192 + grow},            // keeps growing
				"order.orders":             {Bytes: 8192 + grow},
			},
			Offered: i * 100, Confirmed: i * 100,
		})
	}
	r.judge(c)
	got := map[string]verdict{}
	for _, v := range r.Verdicts {
		got[v.Name] = v
	}
	if v := got["table_size order.choreo_idempotency"]; !v.Pass || v.Figure != 1 {
		t.Errorf("idempotency table %+v, want 1.0 and met", v)
	}
	if v := got["table_size order.choreo_outbox"]; v.Pass {
		t.Errorf("outbox table growing past its window %+v, want not met", v)
	}
	if _, ok := got["table_size order.orders"]; ok || len(r.Growth) != 1 || r.Growth[0].Table != "order.orders" ||
		r.Growth[0].BytesPerOrder != 10 {
		t.Errorf("orders: verdict %v, growth %+v; want no verdict and 10 bytes per order", ok, r.Growth)
	}
	if v := got["rss_slope order"]; v.Pass || v.Figure < 59.9 || v.Figure > 60.1 {
		t.Errorf("RSS slope %+v, want 60 MiB/h and not met", v)
	}
	if v := got["confirmed_over_offered"]; !v.Pass || v.Figure != 1 {
		t.Errorf("confirmed ÷ offered %+v, want 1 and met", v)
	}
	var b strings.Builder
	printResults(&b, &r)
	if !strings.Contains(b.String(), "order.orders") || !strings.Contains(b.String(), "FAIL") {
		t.Errorf("printed:\n%s", b.String())
	}
}

// TestJudgeHold: a hold run is judged on its windows of orders (during ÷ before, and
// from a minute after the release ÷ before), its tables are reported at the hold, the
// release and the end, and its RSS, size and drift figures are reported unjudged.
func TestJudgeHold(t *testing.T) {
	c := config{duration: 7 * time.Minute, retention: time.Minute, warmup: time.Minute, holdAt: 2 * time.Minute, hold: 2 * time.Minute}
	// Orders at 10/s for 420 s settling after latency(due) seconds (< 0: never).
	orders := func(latency func(due float64) float64) []settled {
		var out []settled
		for i := range 4200 {
			due := float64(i) / 10
			o := settled{Due: due, Done: -1}
			if l := latency(due); l >= 0 {
				o.Done, o.Confirmed = due+l, true
			}
			out = append(out, o)
		}
		return out
	}
	run := func(latency func(due float64) float64) (*results, map[string]verdict) {
		r := &results{Hold: &holdResult{AtSeconds: 120, ReleaseSeconds: 240}}
		for _, at := range []float64{0, 60, 120.2, 180, 240.3, 300, 420} {
			dead := int64(10)
			if at >= 120 && at < 300 {
				dead = int64(at) * 100 // the dead rows pile up until vacuum's horizon moves on
			}
			r.Samples = append(r.Samples, sample{T: at, RSSMiB: map[string]float64{"order": 100 + at},
				Tables:  map[string]tableSample{"order.choreo_outbox": {Bytes: 8192 + int64(at)*10, DeadTup: dead}},
				Offered: int(at * 10), Confirmed: int(at * 10), TrackerLag: int64(at) * 2})
		}
		r.judge(c)
		r.judgeHold(orders(latency), c.warmup.Seconds(), c.duration.Seconds())
		got := map[string]verdict{}
		for _, v := range r.Verdicts {
			got[v.Name] = v
		}
		return r, got
	}

	// Slower while held (80 ms against 50), slower still the minute after the release,
	// back to 50 ms from then on: every hold figure met.
	r, got := run(func(due float64) float64 {
		switch {
		case due >= 120 && due < 240:
			return 0.08
		case due >= 240 && due < 300:
			return 0.2
		}
		return 0.05
	})
	for _, name := range []string{"hold_throughput during", "hold_p99 during", "hold_throughput after", "hold_p99 after"} {
		if v, ok := got[name]; !ok || !v.Pass || v.Unjudged {
			t.Errorf("%s: %+v, want met and judged", name, v)
		}
	}
	if v := got["hold_p99 during"]; v.Figure < 1.59 || v.Figure > 1.61 {
		t.Errorf("p99 during ÷ before %v, want 80 ÷ 50 ms = 1.6", v.Figure)
	}
	w := r.Hold.Windows
	if len(w) != 4 || w[0].From != 60 || w[0].To != 120 || w[2].Name != "after_1m" || w[2].P99Ratio < 3.99 || w[2].P99Ratio > 4.01 ||
		w[3].From != 300 || w[3].To != 420 || w[0].PerSec < 9.9 || w[0].PerSec > 10.1 {
		t.Errorf("windows %+v", w)
	}
	if tb := r.Hold.Tables; len(tb) != 1 || tb[0].Start.DeadTup != 12000 || tb[0].Release.DeadTup != 24000 || tb[0].End.DeadTup != 10 {
		t.Errorf("tables %+v, want n_dead_tup 12000 → 24000 → 10", tb)
	}
	// The lag at the samples of 120.2, 240.3 (the largest during the hold is the release's),
	// 300 (the first a minute after it) and 420 s.
	if l := r.Hold.TrackerLag; l != (holdLag{AtHold: 240, LargestDuring: 360, AtRelease: 480, MinuteAfter: 600, AtEnd: 840}) {
		t.Errorf("tracker lag %+v", l)
	}
	for _, name := range []string{"rss_slope order", "table_size order.choreo_outbox", "p99_drift"} {
		if v, ok := got[name]; !ok || !v.Unjudged {
			t.Errorf("%s: %+v, want reported and unjudged", name, v)
		}
	}
	if v := got["confirmed_over_offered"]; v.Unjudged {
		t.Errorf("confirmed ÷ offered unjudged in a hold run: %+v", v)
	}
	var b strings.Builder
	printResults(&b, r)
	if out := b.String(); !strings.Contains(out, "after_rest") || !strings.Contains(out, "not judged") || !strings.Contains(out, "at the release 480") || strings.Contains(out, "FAIL") {
		t.Errorf("printed:\n%s", out)
	}

	// Stalled while held (nothing settles until 10 s after the release), and an order
	// after the release never settles: throughput and p99 during, and recovery, not met.
	_, got = run(func(due float64) float64 {
		switch {
		case due >= 120 && due < 240:
			return 250 - due
		case due == 350:
			return -1
		}
		return 0.05
	})
	for _, name := range []string{"hold_throughput during", "hold_p99 during", "hold_throughput after", "hold_p99 after"} {
		if v := got[name]; v.Pass {
			t.Errorf("%s: %+v, want not met", name, v)
		}
	}
	if v := got["hold_throughput during"]; v.Figure > 0.01 {
		t.Errorf("throughput during ÷ before %v, want 0 (nothing confirmed while held)", v.Figure)
	}
}
