package chaos

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// maxListed bounds the anomalies printed per invariant.
const maxListed = 20

// faultSummary is "kill-9 ×18, kill-9 relay leader ×6".
func faultSummary(counts map[string]int) string {
	if len(counts) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

// anomalyCounts counts anomalies per invariant, in invariant order.
func anomalyCounts(as []Anomaly) []struct {
	inv string
	n   int
} {
	m := map[string]int{}
	for _, a := range as {
		m[a.Invariant]++
	}
	var out []struct {
		inv string
		n   int
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, struct {
			inv string
			n   int
		}{k, m[k]})
	}
	return out
}

// WriteText prints each result: verdict, orders, faults, quiescence and the anomalies
// with their order ids (at most maxListed per invariant).
func WriteText(w io.Writer, results []Result) {
	for _, r := range results {
		verdict := "PASS"
		if !r.OK() {
			verdict = "FAIL"
		}
		fmt.Fprintf(w, "\n== scenario %s: %s (seed %d, %s)\n   %s\n", r.Scenario, verdict, r.Seed, r.Took.Round(time.Second), r.Doc)
		if r.Err != "" {
			fmt.Fprintf(w, "   error: %s\n", r.Err)
			continue
		}
		shed := 0
		if r.Load != nil {
			shed = r.Load.Shed
		}
		fmt.Fprintf(w, "   orders %d (placed %d, shed with 503 %d, failed to place %d) at %.1f/s", r.Orders, r.Placed, shed, r.FailedToPlace, r.Rate)
		if r.Saturation > 0 {
			fmt.Fprintf(w, "; measured saturation %.1f/s", r.Saturation)
		}
		if r.Load != nil && r.Load.Latency.N > 0 {
			fmt.Fprintf(w, "; load saw %d settle, p50 %.0f ms, p99 %.0f ms", r.Load.Settled, r.Load.Latency.P50ms, r.Load.Latency.P99ms)
		}
		fmt.Fprintf(w, "\n   faults: %s; dead letters %d", faultSummary(r.FaultCounts), r.DeadLetters)
		if r.Duplicates > 0 {
			fmt.Fprintf(w, "; %d records re-produced", r.Duplicates)
		}
		if len(r.Versions) > 0 {
			fmt.Fprintf(w, "; written: %s", versionsCell(r.Versions))
		}
		quiet := fmt.Sprintf("quiesced %s after the last fault", r.Quiescence.Round(100*time.Millisecond))
		if !r.Quiesced {
			quiet = fmt.Sprintf("NOT quiesced %s after the last fault (%s)", r.Quiescence.Round(time.Second), r.Progress)
		}
		fmt.Fprintf(w, "\n   %s\n", quiet)
		for _, f := range r.Figures {
			fmt.Fprintf(w, "   %s\n", f)
		}
		for _, f := range r.Faults {
			if f.Err != "" {
				fmt.Fprintf(w, "   fault error: %s %s at %s: %s\n", f.Kind, f.Target, f.At.Round(100*time.Millisecond), f.Err)
			}
		}
		if r.Retirement != "" {
			fmt.Fprintf(w, "   sagactl contracts usage -retire %s@1 after the run:\n%s", "payment.authorized", indent(r.Retirement, "     "))
		}
		if len(r.Anomalies) == 0 {
			fmt.Fprintln(w, "   anomalies: 0")
			continue
		}
		fmt.Fprintf(w, "   anomalies: %d\n", len(r.Anomalies))
		listed := map[string]int{}
		for _, a := range r.Anomalies {
			listed[a.Invariant]++
			if listed[a.Invariant] > maxListed {
				continue
			}
			fmt.Fprintf(w, "     [%s] %s %s\n", a.Invariant, cmp.Or(a.OrderID, "-"), a.Detail)
		}
		for _, c := range anomalyCounts(r.Anomalies) {
			if c.n > maxListed {
				fmt.Fprintf(w, "     [%s] ... %d in all\n", c.inv, c.n)
			}
		}
		if r.Logs != "" {
			fmt.Fprintf(w, "   logs: %s\n", r.Logs)
		}
	}
}

// WriteMarkdown writes one table per scenario with the run's row: date, commit, seed,
// orders, faults injected, time to quiescence, dead letters and anomalies.
func WriteMarkdown(w io.Writer, results []Result) {
	for _, r := range results {
		fmt.Fprintf(w, "\n#### %s\n\n%s\n\n", r.Scenario, r.Doc)
		fmt.Fprintln(w, "| date | commit | seed | orders | faults injected | time to quiescence | dead letters | anomalies |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %d | %s |\n",
			r.Started.UTC().Format("2006-01-02 15:04"), cmp.Or(r.Commit, "?"), r.Seed, ordersCell(r), faultsCell(r), quiescenceCell(r), r.DeadLetters, anomaliesCell(r))
		if len(r.Figures) > 0 {
			fmt.Fprintln(w)
		}
		for _, f := range r.Figures {
			fmt.Fprintf(w, "- %s\n", f)
		}
	}
}

func ordersCell(r Result) string {
	s := fmt.Sprintf("%d at %.0f/s", r.Orders, r.Rate)
	if r.Saturation > 0 {
		s += fmt.Sprintf(" (saturation %.0f/s)", r.Saturation)
	}
	return s
}

func faultsCell(r Result) string {
	s := faultSummary(r.FaultCounts)
	if r.Duplicates > 0 {
		s += fmt.Sprintf(" (%d records re-produced)", r.Duplicates)
	}
	if len(r.Versions) > 0 {
		s += " (written: " + versionsCell(r.Versions) + ")"
	}
	return s
}

// versionsCell is "payment.authorized v1 ×812, payment.authorized v2 ×790".
func versionsCell(vs map[string]int) string {
	return faultSummary(vs)
}

// indent prefixes every line of s with p.
func indent(s, p string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = p + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

func quiescenceCell(r Result) string {
	if r.Err != "" {
		return "run failed: " + r.Err
	}
	if !r.Quiesced {
		return fmt.Sprintf("not within %s (%s)", r.Quiescence.Round(time.Second), r.Progress)
	}
	return r.Quiescence.Round(100 * time.Millisecond).String()
}

func anomaliesCell(r Result) string {
	if len(r.Anomalies) == 0 {
		return "0"
	}
	var parts []string
	for _, c := range anomalyCounts(r.Anomalies) {
		parts = append(parts, fmt.Sprintf("%d %s", c.n, c.inv))
	}
	return fmt.Sprintf("**%d**: %s", len(r.Anomalies), strings.Join(parts, "; "))
}
