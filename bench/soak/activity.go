package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// observerApp is the application_name of the observer's connections, which the
	// activity samples leave out.
	observerApp = "soak-observer"
	activityTop = 8   // keys kept per window
	queryChars  = 100 // a normalised query's length
	// lateThird is the window whose figures rank the activity rows: the cost of a held
	// snapshot grows with its age.
	lateThird = "during_last_third"
)

// activityKey is what one active backend was doing at a sample.
type activityKey struct {
	Service string `json:"service"`
	Wait    string `json:"wait"`  // wait_event_type:wait_event, or CPU when it waits on nothing
	Query   string `json:"query"` // normaliseQuery
}

// activitySample is the active backends seen at one sample, T seconds after the load began.
type activitySample struct {
	T    float64
	Keys []activityKey
}

// span is a named window of seconds since the load began, [From, To).
type span struct {
	Name     string
	From, To float64
}

// activityWindow is a window's samples and its average count of active backends.
type activityWindow struct {
	Name    string  `json:"name"` // before, during, during_first_third, during_last_third, after_1m, after_rest
	From    float64 `json:"from_seconds"`
	To      float64 `json:"to_seconds"`
	Samples int     `json:"samples"`
	Active  float64 `json:"avg_active"`
}

// activityRow is one key of a window's top, with its average count of active backends in
// every window (in the order of activityReport.Windows).
type activityRow struct {
	activityKey
	Active []float64 `json:"avg_active"`
}

// activityReport is what the soak's databases' active client backends were doing in each
// window of a hold: the rows are the union of each window's top keys, ranked by the hold's
// last third.
type activityReport struct {
	PeriodSeconds float64          `json:"period_seconds"`
	Errors        int              `json:"errors,omitempty"` // samples whose query failed
	Windows       []activityWindow `json:"windows"`
	Rows          []activityRow    `json:"top"`
}

// observer samples pg_stat_activity every period and snapshots pg_stat_statements at the
// points the run marks, for the soak's databases, through a pool of its own on one of them.
type observer struct {
	pool     *pgxpool.Pool
	start    time.Time
	period   time.Duration
	services map[string]string // datname → service
	names    []string          // the datnames
	logf     func(string, ...any)

	statements bool   // pg_stat_statements is loaded and its view is in the pool's database
	note       string // why there are no statement snapshots
	snaps      map[string]stmtSnapshot

	mu      sync.Mutex
	samples []activitySample
	errs    int

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

// startObserver starts the soak's observer: its pool is on home, a database the soak owns
// (pg_stat_statements' view is created there), and it watches the databases of urls
// (service → URL), sampling their activity every period (0: not at all).
func startObserver(ctx context.Context, home string, urls map[string]string, period time.Duration, start time.Time,
	logf func(string, ...any)) (*observer, error) {
	o := &observer{start: start, period: period, services: map[string]string{}, logf: logf,
		snaps: map[string]stmtSnapshot{}, done: make(chan struct{})}
	for svc, u := range urls {
		cfg, err := pgconn.ParseConfig(u)
		if err != nil {
			return nil, fmt.Errorf("soak: observer %s: %w", svc, err)
		}
		o.services[cfg.Database] = svc
		o.names = append(o.names, cfg.Database)
	}
	sort.Strings(o.names)
	var err error
	if o.statements, o.note, err = setupStatements(ctx, home); err != nil {
		return nil, err
	}
	if o.pool, err = observerPool(ctx, home, o.statements); err != nil {
		return nil, err
	}
	loopCtx, cancel := context.WithCancel(ctx)
	o.cancel = cancel
	if period <= 0 {
		close(o.done)
		return o, nil
	}
	go o.sampleLoop(loopCtx)
	return o, nil
}

// observerPool is a pool on url whose sessions are named observerApp and, when
// pg_stat_statements is loaded, not tracked by it (the soak's own queries are no culprit).
func observerPool(ctx context.Context, url string, untracked bool) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("soak: observer: %w", err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["application_name"] = observerApp
	if untracked {
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "SET pg_stat_statements.track = 'none'")
			return err
		}
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("soak: observer: %w", err)
	}
	return p, nil
}

func (o *observer) sampleLoop(ctx context.Context) {
	defer close(o.done)
	tick := time.NewTicker(o.period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t := time.Since(o.start).Seconds()
		keys, err := o.activity(ctx)
		if ctx.Err() != nil {
			return
		}
		o.mu.Lock()
		if err != nil {
			o.errs++
		} else {
			o.samples = append(o.samples, activitySample{T: t, Keys: keys})
		}
		o.mu.Unlock()
	}
}

// activity reads the active client backends of the observed databases, other than the
// observer's own, and their autovacuum workers (whose query reads "autovacuum: …").
func (o *observer) activity(ctx context.Context) ([]activityKey, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, err := o.pool.Query(ctx, `SELECT datname, coalesce(wait_event_type || ':' || wait_event, 'CPU'), coalesce(query, '')
		FROM pg_stat_activity
		WHERE datname = ANY($1) AND pid <> pg_backend_pid() AND application_name <> $2
			AND (backend_type = 'client backend' AND state = 'active' OR backend_type = 'autovacuum worker')`,
		o.names, observerApp)
	if err != nil {
		return nil, fmt.Errorf("soak: pg_stat_activity: %w", err)
	}
	var keys []activityKey
	for rows.Next() {
		var db, wait, q string
		if err := rows.Scan(&db, &wait, &q); err != nil {
			rows.Close()
			return nil, fmt.Errorf("soak: pg_stat_activity: %w", err)
		}
		keys = append(keys, activityKey{Service: o.services[db], Wait: wait, Query: normaliseQuery(q, queryChars)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("soak: pg_stat_activity: %w", err)
	}
	return keys, nil
}

// sampled is a copy of the samples so far and the count of failed ones.
func (o *observer) sampled() ([]activitySample, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.samples), o.errs
}

// stop ends the sampling and closes the pool; the samples and snapshots stay.
func (o *observer) stop() {
	if o == nil {
		return
	}
	o.stopOnce.Do(func() {
		o.cancel()
		<-o.done
		o.pool.Close()
	})
}

// report puts the activity of each window of h (judgeHold's, with the first and last
// thirds of the hold) and the statements of the hold's last third into h.
func (o *observer) report(h *holdResult) {
	if o == nil || h == nil {
		return
	}
	h.Activity = o.activityReport(activitySpans(h))
	h.Statements = o.statementsReport(holdPoints)
}

// driftReport is what the soak's databases were doing in the p99 drift's windows and in
// each minute, and the statements of the last window against the early one.
type driftReport struct {
	Activity   *activityReport   `json:"activity,omitempty"`
	Minutes    []activityMinute  `json:"activity_per_minute,omitempty"`
	Statements *statementsReport `json:"statements,omitempty"`
}

// activityMinute is a minute's average count of active client backends, by service and
// by wait event type (CPU when waiting on nothing), and of autovacuum workers.
type activityMinute struct {
	Minute     int                `json:"minute"`
	Samples    int                `json:"samples"`
	Active     float64            `json:"avg_active"`
	ByService  map[string]float64 `json:"by_service"`
	ByWaitType map[string]float64 `json:"by_wait_type"`
	Autovacuum float64            `json:"autovacuum_workers"`
}

// drift is the report of a plain soak whose p99 drift windows are early and last
// (seconds since the load began).
func (o *observer) drift(early, last span) *driftReport {
	if o == nil {
		return nil
	}
	early.Name, last.Name = "early", "last"
	d := &driftReport{Activity: o.activityReport([]span{early, last}), Statements: o.statementsReport(driftPoints)}
	if d.Activity != nil {
		samples, _ := o.sampled()
		d.Minutes = activityPerMinute(samples)
	}
	return d
}

// activityReport summarises the samples over spans (nil when activity was not sampled).
func (o *observer) activityReport(spans []span) *activityReport {
	if o.period <= 0 {
		return nil
	}
	samples, errs := o.sampled()
	a := summariseActivity(samples, spans, activityTop)
	a.PeriodSeconds, a.Errors = o.period.Seconds(), errs
	return &a
}

// autovacuum reports whether k is an autovacuum worker's.
func (k activityKey) autovacuum() bool { return strings.HasPrefix(k.Query, "autovacuum:") }

// activityPerMinute averages the samples of each minute since the load began.
func activityPerMinute(samples []activitySample) []activityMinute {
	var out []activityMinute
	for _, s := range samples {
		m := int(s.T / 60)
		for len(out) <= m {
			out = append(out, activityMinute{Minute: len(out), ByService: map[string]float64{}, ByWaitType: map[string]float64{}})
		}
		x := &out[m]
		x.Samples++
		for _, k := range s.Keys {
			if k.autovacuum() {
				x.Autovacuum++
				continue
			}
			x.Active++
			x.ByService[k.Service]++
			waitType, _, _ := strings.Cut(k.Wait, ":")
			x.ByWaitType[waitType]++
		}
	}
	for i := range out {
		x := &out[i]
		n := float64(max(x.Samples, 1))
		x.Active, x.Autovacuum = round3(x.Active/n), round3(x.Autovacuum/n)
		for _, m := range []map[string]float64{x.ByService, x.ByWaitType} {
			for k, v := range m {
				m[k] = round3(v / n)
			}
		}
	}
	return out
}

// activitySpans are the windows of h, with the first and last thirds of during after it.
func activitySpans(h *holdResult) []span {
	var out []span
	for _, w := range h.Windows {
		out = append(out, span{Name: w.Name, From: w.From, To: w.To})
		if w.Name == "during" {
			third := (w.To - w.From) / 3
			out = append(out, span{Name: "during_first_third", From: w.From, To: w.From + third},
				span{Name: lateThird, From: w.To - third, To: w.To})
		}
	}
	return out
}

// normaliseQuery collapses q's whitespace and cuts it to n characters (… marks a cut).
func normaliseQuery(q string, n int) string {
	q = strings.Join(strings.Fields(q), " ")
	if utf8.RuneCountInString(q) <= n {
		return q
	}
	return string([]rune(q)[:n]) + "…"
}

// summariseActivity counts the samples of each span: its average count of active
// backends, and that of each key in the union of every span's top keys, ranked by the
// hold's last third (the last span without one), then by the sum over the spans.
func summariseActivity(samples []activitySample, spans []span, top int) activityReport {
	var r activityReport
	counts := make([]map[activityKey]int, len(spans))
	union := map[activityKey]bool{}
	for i, sp := range spans {
		counts[i] = map[activityKey]int{}
		w := activityWindow{Name: sp.Name, From: sp.From, To: sp.To}
		active := 0
		for _, s := range samples {
			if s.T < sp.From || s.T >= sp.To {
				continue
			}
			w.Samples++
			active += len(s.Keys)
			for _, k := range s.Keys {
				counts[i][k]++
			}
		}
		w.Active = perSample(active, w.Samples)
		r.Windows = append(r.Windows, w)
		for _, k := range topKeys(counts[i], top) {
			union[k] = true
		}
	}
	rank := slices.IndexFunc(spans, func(s span) bool { return s.Name == lateThird })
	if rank < 0 {
		rank = len(spans) - 1
	}
	for k := range union {
		row := activityRow{activityKey: k, Active: make([]float64, len(spans))}
		for i := range spans {
			row.Active[i] = perSample(counts[i][k], r.Windows[i].Samples)
		}
		r.Rows = append(r.Rows, row)
	}
	slices.SortFunc(r.Rows, func(a, b activityRow) int {
		return cmp.Or(cmp.Compare(b.Active[rank], a.Active[rank]), cmp.Compare(sum(b.Active), sum(a.Active)),
			compareKeys(a.activityKey, b.activityKey))
	})
	return r
}

// topKeys is the n keys of counts with the largest counts (ties in key order).
func topKeys(counts map[activityKey]int, n int) []activityKey {
	keys := make([]activityKey, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b activityKey) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), compareKeys(a, b))
	})
	return keys[:min(n, len(keys))]
}

func compareKeys(a, b activityKey) int {
	return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.Wait, b.Wait), cmp.Compare(a.Query, b.Query))
}

// perSample is n ÷ samples to three decimals (0 without samples).
func perSample(n, samples int) float64 {
	if samples == 0 {
		return 0
	}
	return round3(float64(n) / float64(samples))
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

// activityHeads are the printed column heads of the windows.
var activityHeads = map[string]string{"before": "before", "during": "during", "during_first_third": "1st⅓",
	lateThird: "last⅓", "after_1m": "+1m", "after_rest": "rest"}

func printActivity(w io.Writer, a *activityReport) {
	if a == nil {
		return
	}
	failed := ""
	if a.Errors > 0 {
		failed = fmt.Sprintf("; %d samples failed", a.Errors)
	}
	fmt.Fprintf(w, "  active backends (clients and autovacuum workers) of the soak's databases per window (pg_stat_activity every %.1f s, average per sample%s):\n",
		a.PeriodSeconds, failed)
	fmt.Fprint(w, "   ")
	for _, x := range a.Windows {
		fmt.Fprintf(w, " %6s", cmp.Or(activityHeads[x.Name], x.Name))
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "   ")
	for _, x := range a.Windows {
		fmt.Fprintf(w, " %6.2f", x.Active)
	}
	fmt.Fprintln(w, "  all")
	for _, r := range a.Rows {
		fmt.Fprint(w, "   ")
		for _, x := range r.Active {
			fmt.Fprintf(w, " %6.2f", x)
		}
		fmt.Fprintf(w, "  %-9s %-24s %s\n", r.Service, r.Wait, r.Query)
	}
}

// printDrift prints a plain soak's activity and statements in its p99 drift windows and
// its activity per minute.
func printDrift(w io.Writer, d *driftReport) {
	if d == nil {
		return
	}
	printActivity(w, d.Activity)
	printStatements(w, d.Statements)
	if len(d.Minutes) > 0 {
		fmt.Fprintln(w, "  active client backends per minute (average per sample; by service, by wait type) and autovacuum workers:")
	}
	for _, m := range d.Minutes {
		fmt.Fprintf(w, "    %3d  %5.2f  %s  %s  autovacuum %.2f\n", m.Minute, m.Active, fmtMap(m.ByService, 2), fmtMap(m.ByWaitType, 2), m.Autovacuum)
	}
}
