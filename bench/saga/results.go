package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
)

// results is everything one run measured; it is written as bench/results.json.
type results struct {
	Date            string             `json:"date"`
	Commit          string             `json:"commit"`
	Dirty           bool               `json:"dirty"` // uncommitted changes in the worktree
	GoVersion       string             `json:"go_version"`
	CPUs            int                `json:"cpus"`
	LoadAvgBefore   [3]float64         `json:"load_average_before"`
	LoadAvgAfter    [3]float64         `json:"load_average_after"`
	Env             []string           `json:"extra_env,omitempty"`
	Instances       int                `json:"instances_per_service"`
	Partitions      int                `json:"partitions"`
	DurationSeconds float64            `json:"seconds_per_rate"`
	DrainSeconds    float64            `json:"drain_bound_seconds"`
	WarmupSeconds   float64            `json:"warmup_seconds"`
	Seed            uint64             `json:"seed"`
	IdleRSSMiB      map[string]float64 `json:"idle_rss_mib"`
	Rates           []rateResult       `json:"rates"`

	// Saturation is the peak confirmed/s and the offered rate it was measured at.
	PeakConfirmedPerSec float64 `json:"peak_confirmed_per_sec"`
	PeakAtOffered       int     `json:"peak_at_offered"`
	// AboveSaturationMinRatio is the lowest confirmed/s of the rates offered above the
	// peak's, over the peak (0 when no rate was offered above it); NoCollapse says
	// whether it is at least 0.9.
	AboveSaturationMinRatio float64 `json:"above_saturation_min_ratio"`
	NoCollapse              bool    `json:"no_collapse"`

	// Half is half the saturation rate offered after the rates (-half); Replay the saga
	// against its own SQL (-statements); Sweep the cost per order with more instances
	// (-sweep).
	Half   *halfSaturation `json:"half_saturation,omitempty"`
	Replay *sqlReplay      `json:"sql_replay,omitempty"`
	Sweep  *instanceSweep  `json:"instances_sweep,omitempty"`
}

// halfSaturation is the tail at half the saturation rate: p99 over p50, target <= 4.
type halfSaturation struct {
	rateResult
	PeakConfirmedPerSec float64 `json:"peak_confirmed_per_sec"`
	P99OverP50          float64 `json:"p99_over_p50"`
}

func (h *halfSaturation) summarize() {
	if h.P50ms > 0 {
		h.P99OverP50 = h.P99ms / h.P50ms
	}
}

// rateResult is one offered rate.
type rateResult struct {
	Offered         int     `json:"offered_per_sec"`
	Sent            int     `json:"sent"`
	SentPerSec      float64 `json:"sent_per_sec"`
	Late            int     `json:"sent_late"` // sent more than 10 ms after their due time
	MaxLagMs        float64 `json:"max_lag_ms"`
	PostErrors      int     `json:"post_errors"`
	Shed            int     `json:"shed"` // POSTs answered 503 by admission control (not retried)
	FirstError      string  `json:"first_error,omitempty"`
	ConfirmedPerSec float64 `json:"confirmed_per_sec"` // order.confirmed read during the window, any order
	// ConfirmedPerSecLastHalf counts the second half of the window only, when the
	// queues of this rate have formed; ConfirmedEachSecond is the window second by second.
	ConfirmedPerSecLastHalf float64 `json:"confirmed_per_sec_last_half"`
	ConfirmedEachSecond     []int   `json:"confirmed_each_second"`
	Confirmed               int     `json:"confirmed"` // of this rate's orders, after the drain
	Rejected                int     `json:"rejected"`
	Cancelled               int     `json:"cancelled"`
	Unsettled               int     `json:"unsettled"` // of this rate's orders, after the drain
	DrainSeconds            float64 `json:"drain_seconds"`
	// P50ms … P99ms: from the POST's due time to its terminal event read from Kafka,
	// over the LatencyN orders that settled within the drain (a lower bound when some
	// did not; all zero when none did).
	LatencyN            int                     `json:"latency_n"`
	P50ms               float64                 `json:"p50_ms"`
	P95ms               float64                 `json:"p95_ms"`
	P99ms               float64                 `json:"p99_ms"`
	GeneratorCPUPercent float64                 `json:"generator_cpu_percent"` // of one core
	MachineCPUPercent   float64                 `json:"machine_cpu_percent"`   // of all cores
	LoadAvg             [3]float64              `json:"load_average"`
	Services            map[string]serviceStats `json:"services"` // and devkafka, redis
	Profiles            map[string]string       `json:"profiles,omitempty"`
	// DB is what each service's database wrote from the start of the window to the end
	// of the drain, per order created (POST answered 201) at this rate (background work and an earlier rate's
	// backlog included: read it at a rate that settles everything).
	DB map[string]dbAccount `json:"db,omitempty"`
	// WAL is the cluster's WAL records and flushes over the same span, per order created.
	WAL *walAccount `json:"wal,omitempty"`
	// Statements (-statements): every statement each service's database ran during the
	// rate (window and drain), per order created.
	Statements map[string][]statementCount `json:"statements,omitempty"`
	created    int                         // orders created (201) at this rate
}

// serviceStats is one service (all its instances) during a rate's window.
type serviceStats struct {
	CPUPercent         float64 `json:"cpu_percent"` // of one core
	MaxRSSMiB          float64 `json:"max_rss_mib"`
	PostgresCPUPercent float64 `json:"postgres_backends_cpu_percent,omitempty"`
	// ContextSwitchesPerOrder are the process's (all its threads', voluntary and not)
	// during the window, per order confirmed in it; PostgresContextSwitchesPerOrder its
	// Postgres backends'. Each is a thread put to sleep or preempted: a measure of the
	// wake-ups the work costs.
	ContextSwitchesPerOrder         float64     `json:"context_switches_per_order"`
	PostgresContextSwitchesPerOrder float64     `json:"postgres_context_switches_per_order,omitempty"`
	TopWaits                        []waitShare `json:"top_waits,omitempty"`
}

func (r *results) summarize() {
	r.PeakConfirmedPerSec, r.PeakAtOffered = 0, 0
	for _, rr := range r.Rates {
		if rr.ConfirmedPerSec > r.PeakConfirmedPerSec {
			r.PeakConfirmedPerSec, r.PeakAtOffered = rr.ConfirmedPerSec, rr.Offered
		}
	}
	r.AboveSaturationMinRatio, r.NoCollapse = 0, true
	first := true
	for _, rr := range r.Rates {
		if rr.Offered <= r.PeakAtOffered || r.PeakConfirmedPerSec == 0 {
			continue
		}
		ratio := rr.ConfirmedPerSec / r.PeakConfirmedPerSec
		if first || ratio < r.AboveSaturationMinRatio {
			r.AboveSaturationMinRatio, first = ratio, false
		}
	}
	if !first {
		r.NoCollapse = r.AboveSaturationMinRatio >= 0.9
	}
}

// writeJSON writes r under the key "saga" of the results file at path, keeping the
// other benchmarks' keys.
func writeJSON(path string, r *results) error {
	if err := benchutil.MergeJSON(path, "saga", r); err != nil {
		return fmt.Errorf("saga: %w", err)
	}
	return nil
}

func ms(v float64) string {
	d := time.Duration(v * float64(time.Millisecond))
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return fmt.Sprintf("%.0fms", v)
}

// printResults writes the tables of the run.
func printResults(w io.Writer, r *results) {
	dirty := ""
	if r.Dirty {
		dirty = " (with uncommitted changes)"
	}
	fmt.Fprintf(w, "\nwhole saga: %d instance(s) per service, %d partitions, %gs per rate; commit %.12s%s; %d CPUs; load average %.2f %.2f %.2f before, %.2f %.2f %.2f after\n",
		r.Instances, r.Partitions, r.DurationSeconds, r.Commit, dirty, r.CPUs,
		r.LoadAvgBefore[0], r.LoadAvgBefore[1], r.LoadAvgBefore[2], r.LoadAvgAfter[0], r.LoadAvgAfter[1], r.LoadAvgAfter[2])
	groups := []string{}
	for _, s := range append(slices.Clone(serviceNames), "devkafka", "redis") {
		if _, ok := r.IdleRSSMiB[s]; ok {
			groups = append(groups, s)
		}
	}
	idle := []string{}
	for _, g := range groups {
		idle = append(idle, fmt.Sprintf("%s %.1f MiB", g, r.IdleRSSMiB[g]))
	}
	if len(r.Env) > 0 {
		fmt.Fprintf(w, "services run with %s\n", strings.Join(r.Env, " "))
	}
	fmt.Fprintf(w, "RSS when idle: %s\n\n", strings.Join(idle, ", "))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "offered/s\tsent/s\tconfirmed/s\tp50\tp95\tp99\tunsettled\t"
	for _, g := range groups {
		head += g + " CPU%/RSS\t"
	}
	head += "pg CPU% o/p/i\tgen CPU%\tmachine%\tload1\t"
	fmt.Fprintln(tw, head)
	for _, rr := range r.Rates {
		p50, p95, p99 := ms(rr.P50ms), ms(rr.P95ms), ms(rr.P99ms)
		if rr.LatencyN == 0 {
			p50, p95, p99 = "-", "-", "-"
		} else if rr.Unsettled > 0 {
			p50, p95, p99 = ">"+p50, ">"+p95, ">"+p99
		}
		line := fmt.Sprintf("%d\t%.0f\t%.1f\t%s\t%s\t%s\t%d\t", rr.Offered, rr.SentPerSec, rr.ConfirmedPerSec,
			p50, p95, p99, rr.Unsettled)
		for _, g := range groups {
			s := rr.Services[g]
			line += fmt.Sprintf("%.0f%%/%.0fM\t", s.CPUPercent, s.MaxRSSMiB)
		}
		line += fmt.Sprintf("%.0f/%.0f/%.0f\t%.0f%%\t%.0f%%\t%.1f\t", rr.Services["order"].PostgresCPUPercent,
			rr.Services["payment"].PostgresCPUPercent, rr.Services["inventory"].PostgresCPUPercent,
			rr.GeneratorCPUPercent, rr.MachineCPUPercent, rr.LoadAvg[0])
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	fmt.Fprintln(w, "latency: POST due time to the terminal event on orders.events; \">\" = some orders did not settle within the drain (a lower bound), \"-\" = none did")
	fmt.Fprintf(w, "\nsaturation: peak %.1f confirmed/s at %d/s offered", r.PeakConfirmedPerSec, r.PeakAtOffered)
	if r.AboveSaturationMinRatio > 0 || !r.NoCollapse {
		verdict := "holds (>= 90% of the peak)"
		if !r.NoCollapse {
			verdict = "COLLAPSES (< 90% of the peak)"
		}
		fmt.Fprintf(w, "; above it the lowest is %.0f%% of the peak: throughput %s", 100*r.AboveSaturationMinRatio, verdict)
	}
	fmt.Fprintln(w)
	for _, rr := range r.Rates {
		if rr.Late > 0 || rr.PostErrors > 0 || rr.Shed > 0 {
			fmt.Fprintf(w, "%d/s: %d requests sent >10ms late (max %s), %d shed (503), %d POST errors %s\n", rr.Offered, rr.Late,
				ms(rr.MaxLagMs), rr.Shed, rr.PostErrors, rr.FirstError)
		}
	}
	fmt.Fprintln(w, "\ntop pg_stat_activity states/waits (mean sessions over 100 ms samples) per service:")
	for _, rr := range r.Rates {
		fmt.Fprintf(w, "%d/s offered:\n", rr.Offered)
		for _, svc := range serviceNames {
			var parts []string
			for _, ws := range rr.Services[svc].TopWaits {
				parts = append(parts, fmt.Sprintf("%s %.2f", ws.Wait, ws.Sessions))
			}
			if len(parts) == 0 {
				parts = []string{"(all idle)"}
			}
			fmt.Fprintf(w, "  %-9s %s\n", svc, strings.Join(parts, ", "))
		}
	}
	fmt.Fprintln(w, "\ncontext switches per confirmed order (the window; every thread, voluntary and preempted; + its Postgres backends'):")
	for _, rr := range r.Rates {
		var parts []string
		for _, name := range append(slices.Clone(serviceNames), "devkafka", "redis") {
			st, ok := rr.Services[name]
			if !ok {
				continue
			}
			part := fmt.Sprintf("%s %.1f", name, st.ContextSwitchesPerOrder)
			if st.PostgresContextSwitchesPerOrder > 0 {
				part += fmt.Sprintf(" + %.1f", st.PostgresContextSwitchesPerOrder)
			}
			parts = append(parts, part)
		}
		fmt.Fprintf(w, "%d/s offered: %s\n", rr.Offered, strings.Join(parts, ", "))
	}
	fmt.Fprintln(w, "\nconfirmed per second of each window (second half's mean):")
	for _, rr := range r.Rates {
		fmt.Fprintf(w, "%d/s offered: %v (%.1f/s)\n", rr.Offered, rr.ConfirmedEachSecond, rr.ConfirmedPerSecLastHalf)
	}
	fmt.Fprintln(w, "\nPostgres per order created (window + drain; commits, then rows inserted/updated/deleted per table):")
	for _, rr := range r.Rates {
		if len(rr.DB) == 0 {
			continue
		}
		fmt.Fprintf(w, "%d/s offered:\n", rr.Offered)
		for _, svc := range serviceNames {
			a, ok := rr.DB[svc]
			if !ok {
				continue
			}
			var parts []string
			for _, t := range slices.Sorted(maps.Keys(a.RowsPerOrder)) {
				x := a.RowsPerOrder[t]
				parts = append(parts, fmt.Sprintf("%s %.2f/%.2f/%.2f", t, x[0], x[1], x[2]))
			}
			fmt.Fprintf(w, "  %-9s %.2f commits (%.2f rollbacks); %s\n", svc, a.CommitsPerOrder, a.RollbacksPerOrder, strings.Join(parts, ", "))
		}
	}
	for _, rr := range r.Rates {
		if rr.WAL == nil {
			continue
		}
		where := "shared server: other databases' traffic included"
		if rr.WAL.Private {
			where = "private cluster"
		}
		fmt.Fprintf(w, "%d/s offered: WAL per order created: %.2f records, %.2f flushes (%s)\n", rr.Offered, rr.WAL.RecordsPerOrder, rr.WAL.SyncsPerOrder, where)
	}
	for _, rr := range r.Rates {
		if len(rr.Statements) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nstatements per order created at %d/s offered (pg_stat_statements; calls, rows, mean ms):\n", rr.Offered)
		for _, svc := range serviceNames {
			total, nested := 0.0, 0.0
			for _, st := range rr.Statements[svc] {
				if st.Nested {
					nested += st.CallsPerOrder
				} else {
					total += st.CallsPerOrder
				}
			}
			fmt.Fprintf(w, "  %s: %.2f statements sent per order (+ %.2f run inside them: foreign-key checks)\n", svc, total, nested)
			for _, st := range rr.Statements[svc] {
				if st.CallsPerOrder < 0.05 {
					continue
				}
				q := st.Query
				if len(q) > 150 {
					q = q[:150] + "…"
				}
				if st.Nested {
					q = "(inside) " + q
				}
				fmt.Fprintf(w, "    %6.2f %6.2f %6.3f  %s\n", st.CallsPerOrder, st.RowsPerOrder, st.MeanMs, q)
			}
		}
	}
	printTargets(w, r)
	for _, rr := range r.Rates {
		for name, p := range rr.Profiles {
			if strings.HasSuffix(p, ".trace") {
				fmt.Fprintf(w, "execution trace of %s at %d/s: %s (go tool trace -pprof=net %s > net.pprof; go tool pprof -sample_index=contentions -top net.pprof)\n", name, rr.Offered, p, p)
				continue
			}
			fmt.Fprintf(w, "CPU profile of %s at %d/s: %s (go tool pprof -top %s)\n", name, rr.Offered, p, p)
		}
	}
}

// printTargets writes the figures the saga is held to, each with its limit and ratio.
func printTargets(w io.Writer, r *results) {
	if h := r.Half; h != nil {
		fmt.Fprintf(w, "\ntail at half saturation: %d/s offered (peak %.1f/s): p50 %s, p99 %s: p99/p50 = %.2f (target <= 4: %s)\n",
			h.Offered, h.PeakConfirmedPerSec, ms(h.P50ms), ms(h.P99ms), h.P99OverP50, verdict(h.P99OverP50 <= 4))
	}
	if x := r.Replay; x != nil {
		fmt.Fprintf(w, "\nthe saga against its own SQL: statements recorded at %d/s offered, replayed by pgbench (%d clients, %gs per service):\n  %s\n",
			x.RecordedAtOffered, x.Clients, x.Seconds, x.replayLine())
		fmt.Fprintf(w, "  replayed: %.0f orders/s (1 / Σ 1/service); saturation %.1f confirmed/s: ratio %.2f (target >= 0.5: %s)\n",
			x.OrdersPerSec, r.PeakConfirmedPerSec, x.Ratio, verdict(x.Ratio >= 0.5))
		var parts []string
		for _, g := range slices.Sorted(maps.Keys(x.CPUPerConfirmedUS)) {
			parts = append(parts, fmt.Sprintf("%s %.0f", g, x.CPUPerConfirmedUS[g]))
		}
		fmt.Fprintf(w, "  CPU per order: the replay's Postgres backends %.0f µs; the saga at saturation, µs per confirmed: %s\n",
			x.CPUPerOrderUS, strings.Join(parts, ", "))
	}
	if sw := r.Sweep; sw != nil {
		fmt.Fprintf(w, "\ncost per order with more instances: %d/s offered, %d partitions\n", sw.Offered, sw.Partitions)
		for _, p := range sw.Points {
			var parts []string
			for _, g := range slices.Sorted(maps.Keys(p.ByGroup)) {
				parts = append(parts, fmt.Sprintf("%s %.2f/%.0f", g, p.ByGroup[g], p.SwitchesPerOrder[g]))
			}
			fmt.Fprintf(w, "  %d instance(s): %.1f confirmed/s, p50 %s p99 %s, CPU per order %.2f ms (machine %.2f); idle services %.1f%% CPU; ms/context switches per order: %s\n",
				p.Instances, p.ConfirmedPerSec, ms(p.P50ms), ms(p.P99ms), p.SystemCPUms, p.MachineCPUms, p.IdleCPUPercent, strings.Join(parts, ", "))
		}
		if n := len(sw.Points); n > 1 {
			fmt.Fprintf(w, "  %d instances ÷ %d: %.2f× the CPU per order (target <= 1.15: %s)\n", sw.Points[n-1].Instances,
				sw.Points[0].Instances, sw.Ratio, verdict(sw.Ratio <= 1.15))
		}
	}
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "NOT met"
}
