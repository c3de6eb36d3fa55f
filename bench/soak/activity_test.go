package main

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/internal/testenv"
)

// TestNormaliseQuery: whitespace runs become one space and a long query is cut at n
// characters (not bytes), marked with an ellipsis.
func TestNormaliseQuery(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"SELECT 1", 11, "SELECT 1"},
		{"  UPDATE stock\n\t SET qty = qty - $1\n WHERE sku = $2 ", 100, "UPDATE stock SET qty = qty - $1 WHERE sku = $2"},
		{"SELECT 'ééééé' FROM t", 11, "SELECT 'ééé…"},
		{"", 11, ""},
	} {
		if got := normaliseQuery(c.in, c.n); got != c.want {
			t.Errorf("normaliseQuery(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// holdFixture is a hold from 120 to 240 s after a warm-up of 60 s, in a run of 420 s,
// with judgeHold's windows.
func holdFixture() *holdResult {
	return &holdResult{AtSeconds: 120, ReleaseSeconds: 240, Windows: []holdWindow{
		{Name: "before", From: 60, To: 120}, {Name: "during", From: 120, To: 240},
		{Name: "after_1m", From: 240, To: 300}, {Name: "after_rest", From: 300, To: 420}}}
}

// TestSummariseActivity: samples are counted in judgeHold's windows and in the first and
// last thirds of the hold; a window's average is its active backends per sample, each
// window keeps its top keys, and the rows are ranked by the hold's last third.
func TestSummariseActivity(t *testing.T) {
	h := holdFixture()
	spans := activitySpans(h)
	want := []span{{"before", 60, 120}, {"during", 120, 240}, {"during_first_third", 120, 160}, {lateThird, 200, 240},
		{"after_1m", 240, 300}, {"after_rest", 300, 420}}
	if fmt.Sprint(spans) != fmt.Sprint(want) {
		t.Fatalf("spans %v, want %v", spans, want)
	}
	cpu := activityKey{Service: "order", Wait: "CPU", Query: "INSERT INTO orders"}
	lock := activityKey{Service: "inventory", Wait: "LWLock:BufferContent", Query: "UPDATE stock"}
	rare := activityKey{Service: "payment", Wait: "IO:DataFileRead", Query: "SELECT 1"}
	var samples []activitySample
	for i := range 840 { // every half second from 0 to 420 s
		s := activitySample{T: float64(i) / 2, Keys: []activityKey{cpu}}
		if s.T >= 200 && s.T < 240 { // two backends on the lock late in the hold
			s.Keys = append(s.Keys, lock, lock)
		}
		if s.T >= 60 && s.T < 120 && i%4 == 0 { // a quarter of the before window's samples
			s.Keys = append(s.Keys, rare)
		}
		samples = append(samples, s)
	}
	a := summariseActivity(samples, spans, 2)
	got := map[string]activityWindow{}
	for _, w := range a.Windows {
		got[w.Name] = w
	}
	if w := got["before"]; w.Samples != 120 || w.Active != 1.25 {
		t.Errorf("before %+v, want 120 samples of 1.25 active", w)
	}
	if w := got["during"]; w.Samples != 240 || w.Active != 1.667 {
		t.Errorf("during %+v, want 240 samples of 1.667 active (80 of the 240 with 3)", w)
	}
	if w := got[lateThird]; w.Samples != 80 || w.Active != 3 {
		t.Errorf("last third %+v, want 80 samples of 3 active", w)
	}
	if w := got["during_first_third"]; w.Samples != 80 || w.Active != 1 {
		t.Errorf("first third %+v, want 80 samples of 1 active", w)
	}
	// Each window's top 2 are in the union; the lock ranks first, on the last third.
	if len(a.Rows) != 3 || a.Rows[0].activityKey != lock || a.Rows[1].activityKey != cpu || a.Rows[2].activityKey != rare {
		t.Fatalf("rows %+v, want lock, cpu, rare", a.Rows)
	}
	if fmt.Sprint(a.Rows[0].Active) != "[0 0.667 0 2 0 0]" || fmt.Sprint(a.Rows[2].Active) != "[0.25 0 0 0 0 0]" {
		t.Errorf("lock %v, rare %v", a.Rows[0].Active, a.Rows[2].Active)
	}
	if a := summariseActivity(samples, spans, 1); len(a.Rows) != 2 {
		t.Errorf("top 1 of each window: rows %+v, want cpu and lock", a.Rows)
	}
}

// TestRankStatements: statements are ranked by their execution time between the late
// snapshots and reported per call and per second there and before the hold; a statement
// new in the late window has no before figures, one whose counters went down (evicted
// or reset) counts from zero, one without late calls is left out, and the top is cut.
func TestRankStatements(t *testing.T) {
	snap := func(at float64, rows map[stmtKey]stmtStat) stmtSnapshot { return stmtSnapshot{T: at, Rows: rows} }
	upd, sel, gone, fresh, reset := stmtKey{"db_inv", 1}, stmtKey{"db_ord", 2}, stmtKey{"db_ord", 3}, stmtKey{"db_pay", 4}, stmtKey{"db_ord", 5}
	b0 := snap(60, map[stmtKey]stmtStat{upd: {Calls: 100, ExecMs: 100, Blocks: 1000}, sel: {Calls: 0}, gone: {Calls: 5, ExecMs: 50}, reset: {Calls: 1000, ExecMs: 1000}})
	b1 := snap(120, map[stmtKey]stmtStat{upd: {Calls: 700, ExecMs: 400, Blocks: 7000}, sel: {Calls: 600, ExecMs: 60, Blocks: 600}, gone: {Calls: 9, ExecMs: 90}, reset: {Calls: 1600, ExecMs: 1600}})
	l0 := snap(200, map[stmtKey]stmtStat{upd: {Calls: 2000, ExecMs: 2000, Blocks: 20000}, sel: {Calls: 2000, ExecMs: 500}, gone: {Calls: 20, ExecMs: 200}, reset: {Calls: 5000, ExecMs: 5000}})
	l1 := snap(240, map[stmtKey]stmtStat{
		upd:   {Calls: 2400, ExecMs: 6000, Blocks: 220000, Query: "UPDATE  stock\n SET qty = $1"},
		sel:   {Calls: 2400, ExecMs: 700, Blocks: 400, Query: "SELECT order"},
		gone:  {Calls: 20, ExecMs: 200, Query: "SELECT gone"},
		fresh: {Calls: 40, ExecMs: 800, Blocks: 40, Query: "INSERT fresh"},
		reset: {Calls: 100, ExecMs: 300, Query: "DELETE reset"}})
	services := map[string]string{"db_inv": "inventory", "db_ord": "order"}
	rows := rankStatements(b0, b1, l0, l1, services, 3)
	if len(rows) != 3 {
		t.Fatalf("rows %+v, want the top 3", rows)
	}
	want := stmtRow{Service: "inventory", Query: "UPDATE stock SET qty = $1", LateExecMs: 4000, CallsPerSecBefore: 10, CallsPerSecLate: 10,
		MsPerCallBefore: 0.5, MsPerCallLate: 10, BlocksPerCallBefore: 10, BlocksPerCallLate: 500}
	if rows[0] != want {
		t.Errorf("first %+v\nwant  %+v", rows[0], want)
	}
	if r := rows[1]; r.Service != "db_pay" || r.Query != "INSERT fresh" || r.CallsPerSecBefore != 0 || r.MsPerCallLate != 20 {
		t.Errorf("second %+v, want the new statement (its database unmapped) with no before figures", r)
	}
	if r := rows[2]; r.Query != "DELETE reset" || r.LateExecMs != 300 || r.CallsPerSecLate != 2.5 || r.MsPerCallLate != 3 || r.MsPerCallBefore != 1 {
		t.Errorf("third %+v, want the reset statement counting from zero: 100 calls of 3 ms", r)
	}
	all := rankStatements(b0, b1, l0, l1, services, 10)
	if len(all) != 4 || all[3].Query != "SELECT order" || all[3].LateExecMs != 200 || all[3].MsPerCallBefore != 0.1 || all[3].MsPerCallLate != 0.5 {
		t.Errorf("all %+v, want 4 (not the one without late calls)", all)
	}
}

// TestPreloaded: shared_preload_libraries is a comma-separated list, possibly quoted.
func TestPreloaded(t *testing.T) {
	for libs, want := range map[string]bool{"pg_stat_statements": true, `auto_explain, "pg_stat_statements"`: true,
		"": false, "pg_stat_statements_x": false} {
		if got := preloaded(libs, "pg_stat_statements"); got != want {
			t.Errorf("preloaded(%q) = %v, want %v", libs, got, want)
		}
	}
}

// TestPrintHoldCause: a hold run prints its activity per window and its statements after
// the hold table, or the line saying how to load pg_stat_statements.
func TestPrintHoldCause(t *testing.T) {
	h := holdFixture()
	h.Activity = &activityReport{PeriodSeconds: 0.5, Windows: []activityWindow{{Name: "before", Active: 1.2},
		{Name: "during", Active: 2.1}, {Name: "during_first_third", Active: 1.4}, {Name: lateThird, Active: 2.9},
		{Name: "after_1m", Active: 1.8}, {Name: "after_rest", Active: 1.2}},
		Rows: []activityRow{
			{activityKey{"inventory", "LWLock:BufferContent", "UPDATE inventory_stock SET reserved = reserved + $1 WHERE sku = $2"}, []float64{0.1, 0.9, 0.3, 1.6, 0.4, 0.1}},
			{activityKey{"order", "CPU", "INSERT INTO choreo_idempotency (scope, key, expires_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"}, []float64{0.5, 0.6, 0.5, 0.7, 0.6, 0.5}},
		}}
	h.Statements = &statementsReport{BeforeFrom: 60, BeforeTo: 120, LateFrom: 200, LateTo: 240, Top: []stmtRow{
		{Service: "inventory", Query: "UPDATE inventory_stock SET reserved = reserved + $1 WHERE sku = $2", LateExecMs: 4000,
			CallsPerSecBefore: 10, CallsPerSecLate: 10, MsPerCallBefore: 0.5, MsPerCallLate: 10, BlocksPerCallBefore: 10, BlocksPerCallLate: 500},
		{Service: "order", Query: "DELETE FROM choreo_idempotency WHERE expires_at <= $1", LateExecMs: 800, CallsPerSecLate: 0.1, MsPerCallLate: 200, BlocksPerCallLate: 90000},
	}}
	var b strings.Builder
	printResults(&b, &results{Hold: h})
	out := b.String()
	t.Logf("printed:\n%s", out)
	for _, s := range []string{"last⅓", "LWLock:BufferContent", " 1.20  all", "0.500 → 10.000", "- → 200.000", "10.0 → 500.0", "4.0  "} {
		if !strings.Contains(out, s) {
			t.Errorf("printed output lacks %q", s)
		}
	}
	if strings.Index(out, "active backends") < strings.Index(out, "after_rest") {
		t.Error("the activity is printed before the hold table")
	}
	j, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"activity":{"period_seconds":0.5,`, `{"service":"order","wait":"CPU","query":"INSERT`,
		`"statements":{"before_from_seconds":60,`, `"ms_per_call_late":10,`} {
		if !strings.Contains(string(j), s) {
			t.Errorf("JSON lacks %s: %s", s, j)
		}
	}
	h.Statements = &statementsReport{Note: stmtNotLoaded}
	b.Reset()
	printResults(&b, &results{Hold: h})
	if !strings.Contains(b.String(), "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'") {
		t.Errorf("printed:\n%s", b.String())
	}
}

// TestObserver: against a real database, the sampler sees a backend sleeping in
// pg_sleep in another connection (and never its own query), and, when
// pg_stat_statements is loaded, two snapshots see the calls of a statement made between
// them; otherwise the report says how to load it.
func TestObserver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := testenv.PostgresDSN(t)
	o, err := startObserver(ctx, dsn, map[string]string{"order": dsn}, 50*time.Millisecond, time.Now(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer o.stop()

	sleeper, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer sleeper.Close(context.Background())
	sleepCtx, stopSleep := context.WithCancel(ctx)
	slept := make(chan error, 1)
	go func() {
		_, err := sleeper.Exec(sleepCtx, "SELECT pg_sleep(600) /* soak observer test */")
		slept <- err
	}()
	want := activityKey{Service: "order", Wait: "Timeout:PgSleep", Query: "SELECT pg_sleep(600) /* soak observer test */"}
	var samples []activitySample
	seen := func() bool {
		samples, _ = o.sampled()
		for _, s := range samples {
			for _, k := range s.Keys {
				if strings.Contains(k.Query, "pg_stat_activity") {
					t.Fatalf("the sampler saw its own query: %+v", k)
				}
				if k == want {
					return true
				}
			}
		}
		return false
	}
	for !seen() {
		select {
		case <-ctx.Done():
			samples, errs := o.sampled()
			t.Fatalf("no sample of %+v in %d samples (%d failed): %+v", want, len(samples), errs, samples[max(0, len(samples)-3):])
		case <-time.After(50 * time.Millisecond):
		}
	}
	stopSleep()
	<-slept
	a := summariseActivity(samples, []span{{Name: "all", From: 0, To: 1e9}}, activityTop)
	if i := slices.IndexFunc(a.Rows, func(r activityRow) bool { return r.activityKey == want }); i < 0 || a.Rows[i].Active[0] <= 0 {
		t.Errorf("summary %+v, want the sleeping backend in it", a)
	}

	if !o.statements {
		if r := o.statementsReport(holdPoints); !strings.Contains(r.Note, "ALTER SYSTEM SET shared_preload_libraries") {
			t.Errorf("pg_stat_statements not loaded, report %+v", r)
		}
		return
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const marker = "SELECT count(*) FROM generate_series(1, $1) /* soak observer marker */"
	calls := func(n int) {
		for i := range n {
			if _, err := conn.Exec(ctx, marker, i+1); err != nil {
				t.Fatal(err)
			}
		}
	}
	calls(2)
	for _, p := range []string{snapBefore, snapHold, snapLate} {
		o.snapshot(ctx, p)
	}
	calls(5)
	o.snapshot(ctx, snapRelease)
	r := o.statementsReport(holdPoints)
	if r.Note != "" {
		t.Fatalf("statements report: %s", r.Note)
	}
	for _, s := range r.Top {
		if strings.Contains(s.Query, "soak observer marker") { // constants are $n in pg_stat_statements
			if got := s.CallsPerSecLate * (r.LateTo - r.LateFrom); got < 4.5 || got > 5.5 || s.CallsPerSecBefore != 0 || s.Service != "order" {
				t.Errorf("marker %+v: %.2f calls late, want 5 (and none before)", s, got)
			}
			return
		}
	}
	t.Errorf("the marker statement is not in the late top %+v", r.Top)
}

// TestDriftReport: a plain soak's samples are averaged per minute, client backends by
// service and wait type apart from autovacuum workers, and printed after the drift
// windows' activity.
func TestDriftReport(t *testing.T) {
	samples := []activitySample{
		{T: 10, Keys: []activityKey{{"order", "CPU", "SELECT 1"}, {"payment", "Lock:tuple", "UPDATE x"}}},
		{T: 50, Keys: []activityKey{{"order", "LWLock:WALWrite", "COMMIT"},
			{"order", "CPU", "autovacuum: VACUUM public.choreo_idempotency"}}},
		{T: 130, Keys: nil},
	}
	m := activityPerMinute(samples)
	want := []activityMinute{
		{Minute: 0, Samples: 2, Active: 1.5, ByService: map[string]float64{"order": 1, "payment": 0.5},
			ByWaitType: map[string]float64{"CPU": 0.5, "Lock": 0.5, "LWLock": 0.5}, Autovacuum: 0.5},
		{Minute: 1, ByService: map[string]float64{}, ByWaitType: map[string]float64{}},
		{Minute: 2, Samples: 1, ByService: map[string]float64{}, ByWaitType: map[string]float64{}},
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("activityPerMinute = %+v\nwant %+v", m, want)
	}
	a := summariseActivity(samples, []span{{Name: "early", From: 0, To: 60}, {Name: "last", From: 60, To: 180}}, activityTop)
	a.PeriodSeconds = 0.5
	var b strings.Builder
	printResults(&b, &results{Drift: &driftReport{Activity: &a, Minutes: m, Statements: &statementsReport{Note: stmtNotLoaded}}})
	out := b.String()
	t.Logf("printed:\n%s", out)
	for _, s := range []string{"  early   last", "autovacuum: VACUUM", "  0   1.50  order=1.00 payment=0.50  CPU=0.50 LWLock=0.50 Lock=0.50  autovacuum 0.50",
		"ALTER SYSTEM SET shared_preload_libraries"} {
		if !strings.Contains(out, s) {
			t.Errorf("printed output lacks %q", s)
		}
	}
}
