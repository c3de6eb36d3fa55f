package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The points at which pg_stat_statements is snapshotted. In a hold run the base window is
// [snapBefore, snapHold) and the late one the hold's last third, [snapLate, snapRelease);
// in a plain soak they are the p99 drift's windows, [snapEarly, snapEarlyEnd) and
// [snapLast, snapEnd).
const (
	snapBefore   = "before" // the end of warm-up, where judgeHold's before window starts
	snapHold     = "hold"
	snapLate     = "late" // two thirds into the hold
	snapRelease  = "release"
	snapEarly    = "early" // minute 5 (scaled by duration/60m)
	snapEarlyEnd = "early_end"
	snapLast     = "last" // ten minutes (scaled) before the end
	snapEnd      = "end"
	stmtTop      = 10
)

// The windows of the two kinds of run, as [base from, base to, late from, late to] points
// and the labels printed for base and late.
var (
	holdPoints  = stmtWindows{Points: [4]string{snapBefore, snapHold, snapLate, snapRelease}, Base: "before the hold", Late: "the hold's last third"}
	driftPoints = stmtWindows{Points: [4]string{snapEarly, snapEarlyEnd, snapLast, snapEnd}, Base: "the early window", Late: "the last window"}
)

// stmtWindows names the snapshots that bound a report's base and late windows.
type stmtWindows struct {
	Points     [4]string
	Base, Late string
}

// stmtNotLoaded is the report's note when pg_stat_statements is not loaded.
const stmtNotLoaded = "pg_stat_statements is not loaded, so the statements are not reported: " +
	"ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements' and restart Postgres"

// stmtKey is one statement of one database.
type stmtKey struct {
	DB      string
	QueryID int64
}

// stmtStat is a statement's counters in pg_stat_statements (summed over users and nesting
// levels), or their change between two snapshots.
type stmtStat struct {
	Calls  int64
	ExecMs float64 // total_exec_time
	Blocks int64   // shared_blks_hit + shared_blks_read
	Query  string
}

// stmtSnapshot is pg_stat_statements for the observed databases T seconds after the load began.
type stmtSnapshot struct {
	T    float64
	Rows map[stmtKey]stmtStat
}

// stmtRow is one statement's figures in the base window (before the hold) and the late one
// (the hold's last third).
type stmtRow struct {
	Service             string  `json:"service"`
	Query               string  `json:"query"`
	LateExecMs          float64 `json:"late_exec_ms"` // total execution time in the late window
	CallsPerSecBefore   float64 `json:"calls_per_sec_before"`
	CallsPerSecLate     float64 `json:"calls_per_sec_late"`
	MsPerCallBefore     float64 `json:"ms_per_call_before"`
	MsPerCallLate       float64 `json:"ms_per_call_late"`
	BlocksPerCallBefore float64 `json:"shared_blocks_per_call_before"`
	BlocksPerCallLate   float64 `json:"shared_blocks_per_call_late"`
}

// statementsReport is the statements that took the most execution time in the late window,
// beside their figures in the base window (named by Base and Late; the JSON's "before"
// is the base window).
type statementsReport struct {
	Note       string    `json:"note,omitempty"` // why there are none
	Base       string    `json:"base,omitempty"`
	Late       string    `json:"late,omitempty"`
	BeforeFrom float64   `json:"before_from_seconds,omitempty"`
	BeforeTo   float64   `json:"before_to_seconds,omitempty"`
	LateFrom   float64   `json:"late_from_seconds,omitempty"`
	LateTo     float64   `json:"late_to_seconds,omitempty"`
	Top        []stmtRow `json:"top,omitempty"`
}

// setupStatements reports whether pg_stat_statements is loaded on the server behind url
// and, if it is, creates its view in url's database; note says why not otherwise.
func setupStatements(ctx context.Context, url string) (ok bool, note string, err error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return false, "", fmt.Errorf("soak: observer: %w", err)
	}
	defer conn.Close(ctx)
	var libs string
	if err := conn.QueryRow(ctx, "SELECT current_setting('shared_preload_libraries')").Scan(&libs); err != nil {
		return false, "", fmt.Errorf("soak: shared_preload_libraries: %w", err)
	}
	if !preloaded(libs, "pg_stat_statements") {
		return false, stmtNotLoaded, nil
	}
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return false, "", fmt.Errorf("soak: pg_stat_statements: %w", err)
	}
	return true, "", nil
}

// preloaded reports whether lib is in libs, a shared_preload_libraries setting.
func preloaded(libs, lib string) bool {
	for l := range strings.SplitSeq(libs, ",") {
		if strings.Trim(strings.TrimSpace(l), `"`) == lib {
			return true
		}
	}
	return false
}

// snapshot records pg_stat_statements for the observed databases as point (snapBefore,
// …); without pg_stat_statements it does nothing, and a failure is logged, not returned:
// the report then says which point is missing.
func (o *observer) snapshot(ctx context.Context, point string) {
	if o == nil || !o.statements {
		return
	}
	s, err := o.readStatements(ctx)
	if err != nil {
		o.logf("%v", err)
		return
	}
	o.snaps[point] = s
}

func (o *observer) readStatements(ctx context.Context) (stmtSnapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s := stmtSnapshot{T: time.Since(o.start).Seconds(), Rows: map[stmtKey]stmtStat{}}
	rows, err := o.pool.Query(ctx, `SELECT d.datname, coalesce(s.queryid, 0), sum(s.calls)::bigint, sum(s.total_exec_time),
			sum(s.shared_blks_hit + s.shared_blks_read)::bigint, min(s.query)
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
		WHERE d.datname = ANY($1)
		GROUP BY 1, 2`, o.names)
	if err != nil {
		return s, fmt.Errorf("soak: pg_stat_statements: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k stmtKey
		var st stmtStat
		if err := rows.Scan(&k.DB, &k.QueryID, &st.Calls, &st.ExecMs, &st.Blocks, &st.Query); err != nil {
			return s, fmt.Errorf("soak: pg_stat_statements: %w", err)
		}
		s.Rows[k] = st
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("soak: pg_stat_statements: %w", err)
	}
	return s, nil
}

// statementsReport ranks the statements of w's late window, or says why it cannot.
func (o *observer) statementsReport(w stmtWindows) *statementsReport {
	if !o.statements {
		return &statementsReport{Note: o.note}
	}
	var snaps [4]stmtSnapshot
	for i, p := range w.Points {
		s, ok := o.snaps[p]
		if !ok {
			return &statementsReport{Note: "pg_stat_statements: no snapshot at " + p + " (the run ended early or the read failed)"}
		}
		snaps[i] = s
	}
	b0, b1, l0, l1 := snaps[0], snaps[1], snaps[2], snaps[3]
	return &statementsReport{Base: w.Base, Late: w.Late, BeforeFrom: b0.T, BeforeTo: b1.T, LateFrom: l0.T, LateTo: l1.T,
		Top: rankStatements(b0, b1, l0, l1, o.services, stmtTop)}
}

// sub is the change of s since a: s itself when its calls went down (the entry was
// evicted or reset in between and counts from then).
func (s stmtStat) sub(a stmtStat) stmtStat {
	if s.Calls < a.Calls {
		return s
	}
	return stmtStat{Calls: s.Calls - a.Calls, ExecMs: s.ExecMs - a.ExecMs, Blocks: s.Blocks - a.Blocks, Query: s.Query}
}

// rankStatements is the top statements by execution time between l0 and l1 (the late
// window), with their figures there and between b0 and b1 (the before window); services
// maps a database to its service.
func rankStatements(b0, b1, l0, l1 stmtSnapshot, services map[string]string, top int) []stmtRow {
	type change struct {
		k stmtKey
		d stmtStat
	}
	var late []change
	for k, s := range l1.Rows {
		if d := s.sub(l0.Rows[k]); d.Calls > 0 {
			late = append(late, change{k, d})
		}
	}
	slices.SortFunc(late, func(a, b change) int {
		return cmp.Or(cmp.Compare(b.d.ExecMs, a.d.ExecMs), cmp.Compare(a.k.DB, b.k.DB), cmp.Compare(a.k.QueryID, b.k.QueryID))
	})
	rows := make([]stmtRow, 0, min(top, len(late)))
	for _, c := range late[:min(top, len(late))] {
		var before stmtStat
		if s, ok := b1.Rows[c.k]; ok {
			before = s.sub(b0.Rows[c.k])
		}
		rows = append(rows, stmtRow{Service: cmp.Or(services[c.k.DB], c.k.DB), Query: normaliseQuery(c.d.Query, queryChars),
			LateExecMs:      round3(c.d.ExecMs),
			CallsPerSecLate: rate(float64(c.d.Calls), l1.T-l0.T), CallsPerSecBefore: rate(float64(before.Calls), b1.T-b0.T),
			MsPerCallLate: perCall(c.d.ExecMs, c.d.Calls), MsPerCallBefore: perCall(before.ExecMs, before.Calls),
			BlocksPerCallLate:   perCall(float64(c.d.Blocks), c.d.Calls),
			BlocksPerCallBefore: perCall(float64(before.Blocks), before.Calls)})
	}
	return rows
}

// rate is n per second over seconds, to three decimals (0 over no time).
func rate(n, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return round3(n / seconds)
}

// perCall is x per call, to three decimals (0 without calls).
func perCall(x float64, calls int64) float64 {
	if calls <= 0 {
		return 0
	}
	return round3(x / float64(calls))
}

func printStatements(w io.Writer, s *statementsReport) {
	if s == nil {
		return
	}
	if s.Note != "" {
		fmt.Fprintf(w, "  %s\n", s.Note)
		return
	}
	fmt.Fprintf(w, "  statements by execution time in %s, %.0f–%.0f s, against %s, %.0f–%.0f s (pg_stat_statements; exec s: its execution time then; -: no calls):\n",
		cmp.Or(s.Late, holdPoints.Late), s.LateFrom, s.LateTo, cmp.Or(s.Base, holdPoints.Base), s.BeforeFrom, s.BeforeTo)
	fmt.Fprintf(w, "    %-9s %8s %19s %21s %23s  %s\n", "service", "exec s", "calls/s before→late", "ms/call before→late", "blocks/call before→late", "query")
	for _, r := range s.Top {
		fmt.Fprintf(w, "    %-9s %8.1f %19s %21s %23s  %s\n", r.Service, r.LateExecMs/1000,
			pair(r.CallsPerSecBefore, r.CallsPerSecLate, r.CallsPerSecBefore > 0, 1),
			pair(r.MsPerCallBefore, r.MsPerCallLate, r.CallsPerSecBefore > 0, 3),
			pair(r.BlocksPerCallBefore, r.BlocksPerCallLate, r.CallsPerSecBefore > 0, 1), r.Query)
	}
}

// pair formats "a → b" with prec decimals, "- → b" when a has no calls.
func pair(a, b float64, aCalls bool, prec int) string {
	as := "-"
	if aCalls {
		as = fmt.Sprintf("%.*f", prec, a)
	}
	return fmt.Sprintf("%s → %.*f", as, prec, b)
}
