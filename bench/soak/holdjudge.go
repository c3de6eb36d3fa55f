package main

import (
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
)

// The limits of a hold run (issue #45 item 3): while the snapshot is held, throughput
// ≥ 0.8× and p99 ≤ 2× the figures before it; from a minute after the release on, back to
// them: throughput ≥ 0.95× (at a fixed offered rate a system that has caught up confirms
// what is offered) and p99 ≤ 1.25× (the soak's own p99 drift limit).
const (
	holdMinThroughput    = 0.8
	holdMaxP99           = 2.0
	recoverMinThroughput = 0.95
	recoverMaxP99        = 1.25
	recoverAfter         = 60.0 // seconds after the release before recovery is judged
)

// settled is one placed order's due time and terminal time, in seconds since the load
// began (Done < 0: no terminal event by the end of the drain).
type settled struct {
	Due, Done float64
	Confirmed bool
}

// holdWindow is one window of a hold run: orders confirmed within it per second, and
// the p99 POST→terminal latency of the orders due within it.
type holdWindow struct {
	Name      string  `json:"name"` // before, during, after_1m, after_rest
	From      float64 `json:"from_seconds"`
	To        float64 `json:"to_seconds"`
	Confirmed int     `json:"confirmed"`
	PerSec    float64 `json:"confirmed_per_sec"`
	N         int     `json:"n"`         // orders due within the window that settled
	Unsettled int     `json:"unsettled"` // orders due within it without a terminal event
	P99ms     float64 `json:"p99_ms"`
	// Ratios of this window's figures to the before window's.
	ThroughputRatio float64 `json:"throughput_ratio"`
	P99Ratio        float64 `json:"p99_ratio"`
}

// holdTable is a table's size and dead tuples at the hold's start, at its release and
// at the end of the run.
type holdTable struct {
	Table   string      `json:"table"`
	Start   tableSample `json:"at_hold"`
	Release tableSample `json:"at_release"`
	End     tableSample `json:"at_end"`
}

// holdResult is what a hold run adds to the soak's results.
type holdResult struct {
	AtSeconds      float64      `json:"hold_at_seconds"` // when the snapshots were taken
	ReleaseSeconds float64      `json:"release_seconds"` // when they were rolled back
	Databases      []heldDB     `json:"databases"`
	Windows        []holdWindow `json:"windows"`
	Tables         []holdTable  `json:"tables"`
	TrackerLag     holdLag      `json:"tracker_lag"`
	// Activity is what the databases' active backends were doing in each window, and
	// Statements the statements that took the most time late in the hold (-activity,
	// pg_stat_statements): why latency grows with the hold's age.
	Activity   *activityReport   `json:"activity,omitempty"`
	Statements *statementsReport `json:"statements,omitempty"`
}

// holdLag is the tracker's lag (records not committed, -1: not known) around a hold.
type holdLag struct {
	AtHold        int64 `json:"at_hold"`
	LargestDuring int64 `json:"largest_during"`
	AtRelease     int64 `json:"at_release"`
	MinuteAfter   int64 `json:"a_minute_after_release"`
	AtEnd         int64 `json:"at_end"`
}

// window measures orders over [from, to).
func window(name string, orders []settled, from, to float64) holdWindow {
	w := holdWindow{Name: name, From: from, To: to}
	var lat []time.Duration
	for _, o := range orders {
		if o.Confirmed && o.Done >= from && o.Done < to {
			w.Confirmed++
		}
		if o.Due < from || o.Due >= to {
			continue
		}
		if o.Done < 0 {
			w.Unsettled++
			continue
		}
		lat = append(lat, time.Duration((o.Done-o.Due)*float64(time.Second)))
	}
	if to > from {
		w.PerSec = float64(w.Confirmed) / (to - from)
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	w.N = len(lat)
	w.P99ms = benchutil.Percentile(lat, 0.99).Seconds() * 1000
	return w
}

// judgeHold measures the windows of a hold run, from orders, and judges them: before is
// [warm-up, hold), during [hold, release), after_1m the minute after the release and
// after_rest from then to the end of the load. It takes each table's figures from the
// first samples at or after the hold and the release, and the last sample.
func (r *results) judgeHold(orders []settled, warmup, end float64) {
	h := r.Hold
	if h == nil {
		return
	}
	rel := h.ReleaseSeconds
	h.Windows = []holdWindow{
		window("before", orders, warmup, h.AtSeconds),
		window("during", orders, h.AtSeconds, rel),
		window("after_1m", orders, rel, min(rel+recoverAfter, end)),
		window("after_rest", orders, min(rel+recoverAfter, end), end),
	}
	before := h.Windows[0]
	for i := range h.Windows {
		if before.PerSec > 0 {
			h.Windows[i].ThroughputRatio = h.Windows[i].PerSec / before.PerSec
		}
		if before.P99ms > 0 {
			h.Windows[i].P99Ratio = h.Windows[i].P99ms / before.P99ms
		}
	}
	add := func(name string, w holdWindow, tput bool, limit float64) {
		fig, pass, unit := w.P99Ratio, w.P99Ratio > 0 && w.P99Ratio <= limit, "p99 ÷ before"
		note := fmt.Sprintf("%.1f ms (%d orders due in %.0f–%.0f s) ÷ %.1f ms (%.0f–%.0f s)",
			w.P99ms, w.N, w.From, w.To, before.P99ms, before.From, before.To)
		if tput {
			fig, pass, unit = w.ThroughputRatio, w.ThroughputRatio >= limit, "confirmed/s ÷ before"
			note = fmt.Sprintf("%.1f/s (%.0f–%.0f s) ÷ %.1f/s (%.0f–%.0f s)", w.PerSec, w.From, w.To, before.PerSec, before.From, before.To)
		}
		if w.Unsettled > 0 {
			note += fmt.Sprintf(", %d orders due in the window unsettled", w.Unsettled)
			pass = false
		}
		if w.To <= w.From || before.To <= before.From {
			note += ", empty window"
			pass = false
		}
		ratio := 0.0
		if limit != 0 {
			ratio = fig / limit
		}
		r.Verdicts = append(r.Verdicts, verdict{Name: name, Figure: fig, Target: limit, Ratio: ratio, Unit: unit, Pass: pass, Note: note})
	}
	add("hold_throughput during", h.Windows[1], true, holdMinThroughput)
	add("hold_p99 during", h.Windows[1], false, holdMaxP99)
	add("hold_throughput after", h.Windows[3], true, recoverMinThroughput)
	add("hold_p99 after", h.Windows[3], false, recoverMaxP99)

	at, released := r.sampleAt(h.AtSeconds), r.sampleAt(rel)
	if at == nil || released == nil {
		return
	}
	last := r.Samples[len(r.Samples)-1]
	h.TrackerLag = holdLag{AtHold: at.TrackerLag, LargestDuring: -1, AtRelease: released.TrackerLag, MinuteAfter: -1, AtEnd: last.TrackerLag}
	if after := r.sampleAt(rel + recoverAfter); after != nil {
		h.TrackerLag.MinuteAfter = after.TrackerLag
	}
	for _, s := range r.Samples {
		if s.T >= h.AtSeconds && s.T <= rel {
			h.TrackerLag.LargestDuring = max(h.TrackerLag.LargestDuring, s.TrackerLag)
		}
	}
	h.Tables = nil
	for _, name := range sortedKeys(last.Tables) {
		h.Tables = append(h.Tables, holdTable{Table: name, Start: at.Tables[name], Release: released.Tables[name], End: last.Tables[name]})
	}
}

// sampleAt is the first sample at or after t seconds (nil if none).
func (r *results) sampleAt(t float64) *sample {
	for i := range r.Samples {
		if r.Samples[i].T >= t {
			return &r.Samples[i]
		}
	}
	return nil
}

func printHold(w io.Writer, h *holdResult) {
	fmt.Fprintf(w, "hold: a REPEATABLE READ snapshot held from %.0f s to %.0f s on", h.AtSeconds, h.ReleaseSeconds)
	for _, d := range h.Databases {
		fmt.Fprintf(w, " %s (xmin age at release %d)", d.Database, d.XminAge)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %-10s %13s %12s %8s %10s %8s %8s %9s\n", "window", "seconds", "confirmed/s", "÷before", "p99 ms", "÷before", "settled", "unsettled")
	for _, x := range h.Windows {
		fmt.Fprintf(w, "  %-10s %6.0f–%-6.0f %12.1f %8.2f %10.1f %8.2f %8d %9d\n", x.Name, x.From, x.To, x.PerSec,
			x.ThroughputRatio, x.P99ms, x.P99Ratio, x.N, x.Unsettled)
	}
	l := h.TrackerLag
	fmt.Fprintf(w, "  tracker lag (records not committed, -1 unknown): at the hold %d, largest during it %d, at the release %d, a minute after %d, at the end %d\n",
		l.AtHold, l.LargestDuring, l.AtRelease, l.MinuteAfter, l.AtEnd)
	fmt.Fprintln(w, "  n_dead_tup and size (MiB) per table at the hold → at the release → at the end:")
	for _, t := range h.Tables {
		fmt.Fprintf(w, "    %-44s %9d → %9d → %9d   %7.2f → %7.2f → %7.2f\n", t.Table, t.Start.DeadTup, t.Release.DeadTup,
			t.End.DeadTup, mib(t.Start.Bytes), mib(t.Release.Bytes), mib(t.End.Bytes))
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
