package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
)

type tableSample struct {
	Bytes      int64 `json:"bytes"`       // pg_total_relation_size
	IndexBytes int64 `json:"index_bytes"` // pg_indexes_size (the rest is the heap, its TOAST and maps)
	LiveTup    int64 `json:"n_live_tup"`
	DeadTup    int64 `json:"n_dead_tup"`
}

type sample struct {
	T      float64                `json:"t_seconds"`
	RSSMiB map[string]float64     `json:"rss_mib"`
	Tables map[string]tableSample `json:"tables"`
	// Sessions are the client backends on each database but the soak's own: a
	// service's pool and its relay's sessions.
	Sessions  map[string]int `json:"sessions"`
	Offered   int            `json:"offered"`
	Confirmed int            `json:"confirmed"`
	// TrackerLag is the records of the tracker's topics its group has not committed
	// (-1: not known at that sample).
	TrackerLag int64 `json:"tracker_lag"`
}

type minute struct {
	Minute int     `json:"minute"`
	N      int     `json:"n"`
	P50ms  float64 `json:"p50_ms"`
	P99ms  float64 `json:"p99_ms"`
	lat    []time.Duration
}

// verdict is one figure beside its target.
type verdict struct {
	Name   string  `json:"name"`
	Figure float64 `json:"figure"`
	Target float64 `json:"target"`
	Ratio  float64 `json:"ratio"` // figure ÷ target
	Unit   string  `json:"unit"`
	Pass   bool    `json:"pass"`
	Note   string  `json:"note,omitempty"`
	// Unjudged: the figure is reported beside its target but not judged (a hold run's
	// RSS, table sizes and p99 drift, which the hold moves by design).
	Unjudged bool `json:"unjudged,omitempty"`
}

type results struct {
	Date             string    `json:"date"`
	Commit           string    `json:"commit"`
	GoVersion        string    `json:"go_version"`
	CPUs             int       `json:"cpus"`
	SaturationPerSec float64   `json:"saturation_confirmed_per_sec"`
	Rate             int       `json:"offered_per_sec"`
	DurationSeconds  float64   `json:"duration_seconds"`
	SampleSeconds    float64   `json:"sample_seconds"`
	RetentionSeconds float64   `json:"retention_seconds"`
	WarmupSeconds    float64   `json:"warmup_seconds"`
	Env              []string  `json:"env"`
	PostErrors       int       `json:"post_errors"`
	Samples          []sample  `json:"samples"`
	Minutes          []minute  `json:"minutes"`
	Verdicts         []verdict `json:"verdicts"`
	Growth           []growth  `json:"growth"`
	// Hold is a hold run's windows, verdicts' figures and tables (-hold > 0).
	Hold *holdResult `json:"hold,omitempty"`
	// Drift is what the databases did in the p99 drift's windows and per minute (a run
	// without -hold).
	Drift *driftReport `json:"drift,omitempty"`
	// Heap is each service instance's heap at the end of warm-up and at the end (-profiles).
	Heap []heapPoint `json:"heap,omitempty"`
}

// growth is how a table without a retention the soak shortens grew per confirmed order
// from the retention window's end to the end of the run.
type growth struct {
	Table         string  `json:"table"`
	BytesPerOrder float64 `json:"bytes_per_order"`
	Note          string  `json:"note"`
}

// retained reports whether table ("service.name") has a retention the soak shortens,
// so that its size must level off inside the run: idempotency records, outbox rows
// (deleted once acknowledged), dead letters and the tracker's events. The others grow
// with the orders by design (orders, history, ledger, reservations, stock, lock fences
// until their 24 h prune) and are reported as bytes per order instead.
func retained(table string) bool {
	_, name, _ := strings.Cut(table, ".")
	switch name {
	case "choreo_idempotency", "choreo_outbox", "choreo_outbox_dead", "choreo_dead_letters":
		return true
	}
	return strings.HasPrefix(name, "choreo_tracker_events")
}

// slope is the least-squares slope of y over x.
func slope(x, y []float64) float64 {
	n := float64(len(x))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx += x[i]
		sy += y[i]
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// driftWindows are the p99 drift's windows, in minutes since the load began: minutes
// 5–15 and the last 10 of a 60-minute run, scaled by duration/60m for other lengths.
func driftWindows(duration time.Duration) (early, last span) {
	scale, d := duration.Minutes()/60, duration.Minutes()
	return span{Name: "early", From: 5 * scale, To: 15 * scale}, span{Name: "last", From: d - 10*scale, To: d}
}

// p99Window is the p99 of the orders due in minutes [from, to).
func (r *results) p99Window(from, to float64) float64 {
	var l []time.Duration
	for _, m := range r.Minutes {
		if float64(m.Minute) >= math.Floor(from) && float64(m.Minute) < math.Ceil(to) {
			l = append(l, m.lat...)
		}
	}
	sort.Slice(l, func(a, b int) bool { return l[a] < l[b] })
	return benchutil.Percentile(l, 0.99).Seconds() * 1000
}

func (r *results) judge(c config) {
	add := func(name string, fig, target float64, unit string, pass bool, note string) {
		ratio := 0.0
		if target != 0 {
			ratio = fig / target
		}
		r.Verdicts = append(r.Verdicts, verdict{Name: name, Figure: fig, Target: target, Ratio: ratio, Unit: unit,
			Pass: pass, Note: note, Unjudged: c.hold > 0 && name != "confirmed_over_offered"})
	}
	if len(r.Samples) == 0 {
		return
	}
	// RSS slope after warm-up.
	for _, name := range sortedKeys(r.Samples[0].RSSMiB) {
		var x, y []float64
		for _, s := range r.Samples {
			if s.T >= c.warmup.Seconds() && s.T <= c.duration.Seconds() {
				x = append(x, s.T/3600)
				y = append(y, s.RSSMiB[name])
			}
		}
		sl := slope(x, y)
		add("rss_slope "+name, sl, 2, "MiB/h", sl <= 2, fmt.Sprintf("%d samples after %s", len(x), c.warmup))
	}
	// Table sizes: the end against the first sample at or after the retention window.
	var ref *sample
	for i := range r.Samples {
		if r.Samples[i].T >= c.retention.Seconds() {
			ref = &r.Samples[i]
			break
		}
	}
	last := r.Samples[len(r.Samples)-1]
	if ref != nil {
		for _, name := range sortedKeys(last.Tables) {
			b0 := ref.Tables[name].Bytes
			b1 := last.Tables[name].Bytes
			if !retained(name) {
				g := growth{Table: name, Note: fmt.Sprintf("%d → %d bytes", b0, b1)}
				if n := last.Confirmed - ref.Confirmed; n > 0 {
					g.BytesPerOrder = float64(b1-b0) / float64(n)
				}
				r.Growth = append(r.Growth, g)
				continue
			}
			ratio := math.Inf(1)
			if b0 > 0 {
				ratio = float64(b1) / float64(b0)
			}
			t0, t1 := ref.Tables[name], last.Tables[name]
			add("table_size "+name, ratio, 1.1, "end ÷ at retention", ratio <= 1.1,
				fmt.Sprintf("%d → %d bytes (heap %s, indexes %s, live rows %s), n_dead_tup %d", b0, b1,
					ratioOf(t0.Bytes-t0.IndexBytes, t1.Bytes-t1.IndexBytes), ratioOf(t0.IndexBytes, t1.IndexBytes),
					ratioOf(t0.LiveTup, t1.LiveTup), t1.DeadTup))
		}
	}
	// p99 drift.
	ew, lw := driftWindows(c.duration)
	early, late := r.p99Window(ew.From, ew.To), r.p99Window(lw.From, lw.To)
	ratio := 0.0
	if early > 0 {
		ratio = late / early
	}
	add("p99_drift", ratio, 1.25, "p99 last ÷ p99 early", ratio > 0 && ratio <= 1.25,
		fmt.Sprintf("p99 %.1f ms (minutes %.1f–%.1f) ÷ %.1f ms (minutes %.1f–%.1f)", late, lw.From, lw.To, early, ew.From, ew.To))
	cr := 0.0
	if last.Offered > 0 {
		cr = float64(last.Confirmed) / float64(last.Offered)
	}
	add("confirmed_over_offered", cr, 1, "ratio", last.Confirmed == last.Offered && last.Offered > 0,
		fmt.Sprintf("%d confirmed of %d offered, %d POST errors", last.Confirmed, last.Offered, r.PostErrors))
}

// ratioOf formats b ÷ a, or "–" when a is not positive.
func ratioOf(a, b int64) string {
	if a <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", float64(b)/float64(a))
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func printResults(w io.Writer, r *results) {
	fmt.Fprintf(w, "soak: saturation %.1f/s, offered %d/s for %.0f s, retention %.0f s, commit %.12s\n",
		r.SaturationPerSec, r.Rate, r.DurationSeconds, r.RetentionSeconds, r.Commit)
	fmt.Fprintf(w, "%-48s %12s %8s %8s  %s\n", "target", "figure", "limit", "ratio", "")
	unjudged := false
	for _, v := range r.Verdicts {
		ok := "ok"
		switch {
		case v.Unjudged:
			ok, unjudged = "-", true
		case !v.Pass:
			ok = "FAIL"
		}
		fmt.Fprintf(w, "%-48s %12.3f %8.2f %8.2f  %-4s %s (%s)\n", v.Name, v.Figure, v.Target, v.Ratio, ok, v.Unit, v.Note)
	}
	if unjudged {
		fmt.Fprintln(w, "-: reported, not judged: a held snapshot keeps vacuum from the dead rows, so tables and memory grow and latency moves by design")
	}
	if r.Hold != nil {
		printHold(w, r.Hold)
		printActivity(w, r.Hold.Activity)
		printStatements(w, r.Hold.Statements)
	}
	printDrift(w, r.Drift)
	printHeap(w, r.Heap)
	if len(r.Growth) > 0 {
		fmt.Fprintln(w, "tables without a retention the soak shortens (they grow with the orders by design):")
		for _, g := range r.Growth {
			fmt.Fprintf(w, "  %-46s %10.0f bytes per confirmed order (%s)\n", g.Table, g.BytesPerOrder, g.Note)
		}
	}
	var b strings.Builder
	for _, m := range r.Minutes {
		fmt.Fprintf(&b, " %d:%.0f/%.0f", m.Minute, m.P50ms, m.P99ms)
	}
	fmt.Fprintf(w, "p50/p99 ms per minute:%s\n", b.String())
}

func writeJSON(path, key string, r *results) error {
	if err := benchutil.MergeJSON(path, key, r); err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	return nil
}
