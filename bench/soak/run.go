package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/bench/internal/orderwatch"
	"github.com/choreo-saga/choreo/chaos"
	"github.com/choreo-saga/choreo/internal/procstat"
	"github.com/choreo-saga/choreo/tracker"
)

// saturation runs bench/saga over rates and returns its peak confirmed orders/s.
func saturation(ctx context.Context, c config) (float64, error) {
	tmp, err := os.CreateTemp("", "soak-sat-*.json")
	if err != nil {
		return 0, fmt.Errorf("soak: %w", err)
	}
	// bench/saga merges its key into the file: it must hold a JSON object.
	_, err = tmp.WriteString("{}")
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err != nil {
		return 0, fmt.Errorf("soak: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "run", "./bench/saga", "-rates", c.satRates, "-duration", c.satDur.String(),
		"-half=false", "-json", tmp.Name(), "-svg", "")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("soak: bench/saga: %w", err)
	}
	b, err := os.ReadFile(tmp.Name())
	if err != nil {
		return 0, fmt.Errorf("soak: %w", err)
	}
	var f struct {
		Saga struct {
			Peak float64 `json:"peak_confirmed_per_sec"`
		} `json:"saga"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return 0, fmt.Errorf("soak: bench/saga results: %w", err)
	}
	return f.Saga.Peak, nil
}

// order is one placed order.
type order struct {
	due    time.Time
	posted time.Time // when the POST was answered
	id     string
}

func run(ctx context.Context, c config) (*results, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "soak: "+format+"\n", args...) }
	res := &results{Date: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
		DurationSeconds: c.duration.Seconds(), SampleSeconds: c.sample.Seconds(), RetentionSeconds: c.retention.Seconds(),
		WarmupSeconds: c.warmup.Seconds()}
	res.Commit, _ = benchutil.GitCommit(ctx)
	if c.rate > 0 {
		res.Rate = c.rate
	} else {
		logf("measuring the saturation rate: go run ./bench/saga -rates %s -duration %s", c.satRates, c.satDur)
		peak, err := saturation(ctx, c)
		if err != nil {
			return nil, err
		}
		res.SaturationPerSec = peak
		res.Rate = max(1, int(peak/2+0.5))
	}
	ret := c.retention.String()
	res.Env = []string{"IDEMPOTENCY_RETENTION=" + ret, "DEAD_LETTER_RETENTION=" + ret, "ORDER_STUCK_AFTER=10s",
		"PAYMENT_HANG_CUSTOMERS=c-hang", "DATABASE_MIN_CONNS=16", "PPROF=1",
		// Stock and balances for any soak: the defaults run out after about 100,000 and
		// 180,000 orders.
		"INVENTORY_SEED=sku-1..sku-20:1000000000", "PAYMENT_SEED_CUSTOMERS=c-1..c-100:1000000000000:100000,c-hang:10000000:100000"}
	pgURL := benchutil.DefaultPostgresDSN()
	restore, err := scaleAutovacuum(ctx, pgURL)
	if err != nil {
		return nil, err
	}
	defer restore()
	logf("starting the system; half the saturation: %d orders/s for %s", res.Rate, c.duration)
	sys, err := chaos.Start(ctx, chaos.Options{Instances: 1, Partitions: 6, PostgresURL: pgURL, MaxConns: c.maxConns,
		Env: res.Env, Log: os.Stderr, Dir: c.dir})
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	defer sys.Close()
	pids := map[string]int{}
	for _, in := range sys.Instances() {
		pids[in.Service] = in.PID
	}
	// The tracker: its own database, binary and retention.
	trackerURL, drop, err := benchutil.CreateDB(ctx, pgURL, "soak_tracker")
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	defer func() { _ = drop() }()
	bin := filepath.Join(sys.Dir(), "sagactl-soak")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/sagactl").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("soak: build sagactl: %w: %s", err, out)
	}
	tlog, err := os.Create(filepath.Join(sys.Dir(), "tracker.log"))
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	defer tlog.Close()
	tr := exec.Command(bin, "track", "-brokers", sys.Brokers(), "-db", trackerURL, "-config", "deploy/tracker/order.json",
		"-retention", ret, "-refresh", "15s", "-order-url", sys.OrderURL())
	tr.Stdout, tr.Stderr = tlog, tlog
	if err := tr.Start(); err != nil {
		return nil, fmt.Errorf("soak: sagactl track: %w", err)
	}
	defer func() { _ = tr.Process.Signal(os.Interrupt); _ = tr.Wait() }()
	pids["tracker"] = tr.Process.Pid

	// The soak's own sessions are named, so the sessions counted per database are the
	// system's: a service's pool and its relay's.
	dbURLs := map[string]string{"tracker": withParam(trackerURL, "application_name="+soakApp)}
	for svc, name := range sys.Databases() {
		dbURLs[svc] = withParam(withDB(pgURL, name), "application_name="+soakApp)
	}
	pools := map[string]*pgxpool.Pool{}
	for svc, u := range dbURLs {
		p, err := pgxpool.New(ctx, u)
		if err != nil {
			return nil, fmt.Errorf("soak: postgres %s: %w", svc, err)
		}
		defer p.Close()
		pools[svc] = p
	}

	// The tracker's lag: records of its group's topics it has not committed yet.
	kcl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(sys.Brokers(), ",")...))
	if err != nil {
		return nil, fmt.Errorf("soak: kafka admin client: %w", err)
	}
	defer kcl.Close()
	adm := kadm.NewClient(kcl)

	w, stopWatch, err := orderwatch.Start(ctx, sys.Brokers())
	if err != nil {
		return nil, err
	}
	defer stopWatch()
	time.Sleep(3 * time.Second) // the tracker joins its group

	var (
		mu       sync.Mutex
		orders   []*order
		answered []*order // the orders whose POST returned an id, in that order
		errs     int
		counts   tally
	)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	start := time.Now()
	end := start.Add(c.duration)
	// What the databases do (active backends and statements): around the hold (-hold),
	// in the p99 drift's windows otherwise.
	obs, err := startObserver(ctx, trackerURL, dbURLs, c.activity, start, logf)
	if err != nil {
		return nil, err
	}
	defer obs.stop()
	loadCtx, stopLoad := context.WithDeadline(ctx, end)
	defer stopLoad()
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		interval := time.Duration(float64(time.Second) / float64(res.Rate))
		for i := 0; ; i++ {
			due := start.Add(time.Duration(i) * interval)
			if !due.Before(end) {
				return
			}
			select {
			case <-loadCtx.Done():
				return
			case <-time.After(time.Until(due)):
			}
			qty := 1 + rng.IntN(3)
			body, _ := json.Marshal(map[string]any{"customer_id": fmt.Sprintf("c-%d", 1+rng.IntN(100)),
				"items":  []map[string]any{{"sku": fmt.Sprintf("sku-%d", 1+rng.IntN(20)), "qty": qty}},
				"amount": int64(qty) * int64(500+rng.IntN(4500))})
			o := &order{due: due}
			mu.Lock()
			orders = append(orders, o)
			mu.Unlock()
			wg.Go(func() {
				id, err := orderwatch.Place(ctx, client, sys.OrderURL()+"/orders", body)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs++
					return
				}
				o.id, o.posted = id, time.Now()
				answered = append(answered, o)
			})
		}
	})

	sampleOnce := func() {
		s := sample{T: time.Since(start).Seconds(), RSSMiB: map[string]float64{}, Tables: map[string]tableSample{}, Sessions: map[string]int{}}
		for name, pid := range pids {
			rss, _, _ := procstat.Memory(pid)
			s.RSSMiB[name] = float64(rss) / (1 << 20)
		}
		for svc, p := range pools {
			var n int
			if p.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND application_name <> $1`, soakApp).Scan(&n) == nil {
				s.Sessions[svc] = n
			}
			rows, err := p.Query(ctx, `SELECT relname, pg_total_relation_size(relid), pg_indexes_size(relid), n_live_tup, n_dead_tup FROM pg_stat_user_tables`)
			if err != nil {
				continue
			}
			for rows.Next() {
				var name string
				var ts tableSample
				if rows.Scan(&name, &ts.Bytes, &ts.IndexBytes, &ts.LiveTup, &ts.DeadTup) == nil {
					s.Tables[svc+"."+name] = ts
				}
			}
			rows.Close()
		}
		s.TrackerLag = -1
		if lags, err := adm.Lag(ctx, tracker.DefaultGroup); err == nil {
			if l, ok := lags[tracker.DefaultGroup]; ok && l.Error() == nil {
				s.TrackerLag = l.Lag.Total()
			}
		}
		mu.Lock()
		fresh := answered[counts.taken:]
		counts.taken = len(answered)
		mu.Unlock()
		counts.update(fresh, w.Lookup)
		s.Offered, s.Confirmed = counts.offered, counts.confirmed
		res.Samples = append(res.Samples, s)
		logf("t=%4.0fs offered %d confirmed %d rss %v sessions %v tracker lag %d", s.T, s.Offered, s.Confirmed, fmtMap(s.RSSMiB, 0), s.Sessions, s.TrackerLag)
	}
	saveHeap := func(point string) {
		hs, err := saveHeaps(context.WithoutCancel(ctx), sys.Instances(), c.profiles, point, time.Since(start).Seconds())
		res.Heap = append(res.Heap, hs...)
		if err != nil {
			logf("%v", err)
		}
	}
	// Timers of the hold (-hold), of its statement snapshots before it and in its last
	// third, and of the warm-up's heap profiles (-profiles); nil: none.
	var holdAt, release, warmedUp, stmtsBefore, holdLate <-chan time.Time
	if c.hold > 0 {
		holdAt, stmtsBefore = time.After(c.holdAt), time.After(c.warmup)
	}
	// Without a hold, the statement snapshots bound the p99 drift's windows; the last one
	// is taken when the load ends.
	earlyWindow, lastWindow := driftWindows(c.duration)
	var earlyFrom, earlyTo, lastFrom <-chan time.Time
	if c.hold <= 0 {
		minutes := func(m float64) <-chan time.Time { return time.After(time.Duration(m * float64(time.Minute))) }
		earlyFrom, earlyTo, lastFrom = minutes(earlyWindow.From), minutes(earlyWindow.To), minutes(lastWindow.From)
	}
	if c.profiles != "" {
		warmedUp = time.After(c.warmup)
	}
	var (
		held    *snapshotHold
		holdErr error
	)
	sampleOnce()
	tick := time.NewTicker(c.sample)
	defer tick.Stop()
	for time.Now().Before(end) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			sampleOnce()
		case <-warmedUp:
			saveHeap("warmup")
		case <-stmtsBefore:
			obs.snapshot(ctx, snapBefore)
		case <-earlyFrom:
			obs.snapshot(ctx, snapEarly)
		case <-earlyTo:
			obs.snapshot(ctx, snapEarlyEnd)
		case <-lastFrom:
			obs.snapshot(ctx, snapLast)
		case <-holdAt:
			obs.snapshot(ctx, snapHold)
			if held, holdErr = holdSnapshots(ctx, dbURLs); holdErr != nil {
				logf("%v", holdErr)
				continue
			}
			res.Hold = &holdResult{AtSeconds: time.Since(start).Seconds()}
			logf("t=%4.0fs holding a REPEATABLE READ snapshot on %d databases for %s", res.Hold.AtSeconds, len(held.DBs), c.hold)
			sampleOnce()
			release, holdLate = time.After(c.hold), time.After(2*c.hold/3)
		case <-holdLate:
			obs.snapshot(ctx, snapLate)
		case <-release:
			obs.snapshot(ctx, snapRelease)
			err := held.release(ctx)
			res.Hold.ReleaseSeconds = time.Since(start).Seconds()
			res.Hold.Databases, held = held.DBs, nil
			if err != nil {
				holdErr = err
				logf("%v", err)
			}
			logf("t=%4.0fs released the snapshots", res.Hold.ReleaseSeconds)
			sampleOnce()
		}
	}
	if held != nil { // interrupted during the hold
		_ = held.release(context.WithoutCancel(ctx))
		res.Hold.ReleaseSeconds, res.Hold.Databases, held = time.Since(start).Seconds(), held.DBs, nil
	}
	if c.hold <= 0 {
		obs.snapshot(ctx, snapEnd)
	}
	obs.stop()
	if c.profiles != "" {
		saveHeap("end")
	}
	wg.Wait()
	// Drain: every placed order settles within a bounded time.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if pendingOrders(orders, w) == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	sampleOnce()
	res.PostErrors = errs
	res.Minutes = perMinute(orders, w, start)
	if c.ordersPath != "" {
		if err := writeOrders(c.ordersPath, orders, w, start); err != nil {
			logf("%v", err)
		}
	}
	res.judge(c)
	res.judgeHold(settledOrders(orders, w, start), c.warmup.Seconds(), c.duration.Seconds())
	obs.report(res.Hold)
	if c.hold <= 0 {
		toSeconds := func(s span) span { return span{From: s.From * 60, To: s.To * 60} }
		res.Drift = obs.drift(toSeconds(earlyWindow), toSeconds(lastWindow))
	}
	return res, errors.Join(holdErr, ctx.Err())
}

// writeOrders writes every placed order as a CSV line of seconds since the load began:
// when it was due, when its POST was answered and when its terminal event was read
// (-1: none), and its outcome.
// tally counts the answered orders and the confirmed among them as they come, so that a
// sample looks up only the orders not yet settled. Walking every order under the load
// generator's mutex, as a sample once did, delayed the POSTs due meanwhile (tens of ms at
// 500k orders): a load tool must not limit what it measures.
type tally struct {
	taken              int      // answered orders handed to update so far
	open               []*order // answered orders without a terminal event yet
	offered, confirmed int
}

// update adds the orders answered since the last call and looks up the open ones.
func (t *tally) update(fresh []*order, lookup func(id string) (orderwatch.Terminal, bool)) {
	t.offered += len(fresh)
	open := append(t.open, fresh...)
	t.open = open[:0]
	for _, o := range open {
		e, ok := lookup(o.id)
		switch {
		case !ok:
			t.open = append(t.open, o)
		case e.Outcome == orderwatch.Confirmed:
			t.confirmed++
		}
	}
	clear(open[len(t.open):])
}

func writeOrders(path string, orders []*order, w *orderwatch.Watcher, start time.Time) error {
	var b strings.Builder
	b.WriteString("due_s,posted_s,terminal_s,outcome\n")
	for _, o := range orders {
		if o.id == "" {
			continue
		}
		done, outcome := -1.0, "pending"
		if e, ok := w.Lookup(o.id); ok {
			done, outcome = e.At.Sub(start).Seconds(), e.Outcome.String()
		}
		fmt.Fprintf(&b, "%.3f,%.3f,%.3f,%s\n", o.due.Sub(start).Seconds(), o.posted.Sub(start).Seconds(), done, outcome)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("soak: -orders: %w", err)
	}
	return nil
}

// settledOrders is every placed order's due and terminal time since start.
func settledOrders(orders []*order, w *orderwatch.Watcher, start time.Time) []settled {
	out := make([]settled, 0, len(orders))
	for _, o := range orders {
		if o.id == "" {
			continue
		}
		s := settled{Due: o.due.Sub(start).Seconds(), Done: -1}
		if e, ok := w.Lookup(o.id); ok {
			s.Done, s.Confirmed = e.At.Sub(start).Seconds(), e.Outcome == orderwatch.Confirmed
		}
		out = append(out, s)
	}
	return out
}

func pendingOrders(orders []*order, w *orderwatch.Watcher) int {
	n := 0
	for _, o := range orders {
		if o.id != "" {
			if _, ok := w.Lookup(o.id); !ok {
				n++
			}
		}
	}
	return n
}

// perMinute buckets POST→terminal latency by the minute of the order's due time.
func perMinute(orders []*order, w *orderwatch.Watcher, start time.Time) []minute {
	var lats [][]time.Duration
	for _, o := range orders {
		if o.id == "" {
			continue
		}
		e, ok := w.Lookup(o.id)
		if !ok {
			continue
		}
		m := int(o.due.Sub(start) / time.Minute)
		for len(lats) <= m {
			lats = append(lats, nil)
		}
		lats[m] = append(lats[m], e.At.Sub(o.due))
	}
	out := make([]minute, len(lats))
	for i, l := range lats {
		sort.Slice(l, func(a, b int) bool { return l[a] < l[b] })
		out[i] = minute{Minute: i, N: len(l), P50ms: benchutil.Percentile(l, 0.5).Seconds() * 1000,
			P99ms: benchutil.Percentile(l, 0.99).Seconds() * 1000, lat: l}
	}
	return out
}

// fmtMap is m's entries in key order, "k=v" with v to prec decimals.
func fmtMap(m map[string]float64, prec int) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%.*f", k, prec, m[k])
	}
	return strings.Join(parts, " ")
}

// withDB returns the URL base naming database name.
// soakApp is the application_name of the soak's own sessions.
const soakApp = "choreo-soak"

// withParam adds a query parameter (k=v) to a connection URL.
func withParam(u, kv string) string {
	if strings.Contains(u, "?") {
		return u + "&" + kv
	}
	return u + "?" + kv
}

func withDB(base, name string) string {
	i := strings.LastIndex(base, "/")
	q := ""
	if j := strings.IndexByte(base, '?'); j > i {
		q = base[j:]
	}
	return base[:i+1] + name + q
}
