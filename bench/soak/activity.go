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

// observe starts the observer of a hold run (nil without -hold): its pool is on home, a
// database the soak owns (pg_stat_statements' view is created there), and it watches the
// databases of urls (service → URL). Activity is sampled every c.activity (0: not at all).
func observe(ctx context.Context, c config, home string, urls map[string]string, start time.Time,
	logf func(string, ...any)) (*observer, error) {
	if c.hold <= 0 {
		return nil, nil
	}
	return startObserver(ctx, home, urls, c.activity, start, logf)
}

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
// observer's own.
func (o *observer) activity(ctx context.Context) ([]activityKey, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, err := o.pool.Query(ctx, `SELECT datname, coalesce(wait_event_type || ':' || wait_event, 'CPU'), coalesce(query, '')
		FROM pg_stat_activity
		WHERE state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
			AND application_name <> $2 AND datname = ANY($1)`, o.names, observerApp)
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
	if o.period > 0 {
		samples, errs := o.sampled()
		a := summariseActivity(samples, activitySpans(h), activityTop)
		a.PeriodSeconds, a.Errors = o.period.Seconds(), errs
		h.Activity = &a
	}
	h.Statements = o.statementsReport()
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
// hold's last third (the first span without one), then by the sum over the spans.
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
	rank := max(0, slices.IndexFunc(spans, func(s span) bool { return s.Name == lateThird }))
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
	fmt.Fprintf(w, "  active backends of the soak's databases per window (pg_stat_activity every %.1f s, average per sample%s):\n",
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
