package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/services/events"
)

// The partitions scenario: many partitions and members. It is not one of [Scenarios]
// (`make chaos`): it starts two systems of twelve instances, one after the other, so
// cmd/chaos runs it by name only (`make chaos-partitions`).

// FaultRestart is a graceful restart: SIGTERM, the exit waited for, started again and
// waited for until ready.
const FaultRestart = "restart (SIGTERM)"

// Defaults of the partitions scenario, overridden by Options.Instances and
// Options.Partitions (the larger count).
const (
	partitionsInstances = 4
	partitionsMany      = 64
	partitionsFew       = 8
	// partitionsMinRatio: confirmed/s with many partitions ÷ with few, at least.
	partitionsMinRatio = 0.9
	// partitionsSlack is added to the session time-out for the time by which every
	// partition of a killed member's group must be consumed again.
	partitionsSlack = 5 * time.Second
	// harnessConns are the Postgres sessions the harness itself may hold at once: its
	// maintenance pool (4) and a pool of 2 per service for the quiescence, the
	// throughput and the check, one after the other.
	harnessConns = 10
	// relayConns are the sessions each instance's outbox relay opens outside its pool.
	relayConns = 2
)

// Extra are the scenarios cmd/chaos runs only when named (-scenarios), not with "all"
// nor in `make chaos`: they take much longer than the others.
var Extra = []Scenario{partitionsScenario, pgbouncerScenario}

var partitionsScenario = Scenario{
	Name: "partitions",
	Doc: "4 instances of each service: saturation measured with 8 partitions per topic, half of it offered to that system and then to one with 64 " +
		"(confirmed/s compared); on the 64-partition system under load, kill -9 of a payment instance, left down until every partition of its group " +
		"is consumed again, then a rolling restart of all 12 instances (SIGTERM, exit, start, ready, the next)",
	NoDeadline: true,
	own:        runPartitions,
}

// Figure is one measured figure of a scenario, judged against its limit.
type Figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
	Limit float64 `json:"limit"`
	// AtLeast: the figure passes when Value >= Limit; otherwise when Value <= Limit.
	AtLeast bool   `json:"at_least,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// Missing: the figure could not be measured (Detail says why); it fails.
	Missing bool `json:"missing,omitempty"`
}

// OK reports whether the figure was measured and is within its limit.
func (f Figure) OK() bool {
	switch {
	case f.Missing:
		return false
	case f.AtLeast:
		return f.Value >= f.Limit
	default:
		return f.Value <= f.Limit
	}
}

// String is "name: value unit (limit ≤ x unit): ok; detail".
func (f Figure) String() string {
	cmpSign, verdict := "≤", "ok"
	if f.AtLeast {
		cmpSign = "≥"
	}
	if !f.OK() {
		verdict = "FAIL"
	}
	unit := ""
	if f.Unit != "" {
		unit = " " + f.Unit
	}
	val := fmt.Sprintf("%.2f%s", f.Value, unit)
	if f.Missing {
		val = "not measured"
	}
	s := fmt.Sprintf("%s: %s (limit %s %.2f%s): %s", f.Name, val, cmpSign, f.Limit, unit, verdict)
	if f.Detail != "" {
		s += "; " + f.Detail
	}
	return s
}

// poolSize is each instance's DATABASE_MAX_CONNS in the partitions scenario: what one
// member needs for the partitions it owns plus 4 (HTTP and the rest), if the server's
// free connections (max_connections − superuser_reserved − in use) leave that much for
// every process besides the harness's own; else that share. It fails when the share is
// under 4.
func poolSize(maxConnections, reserved, inUse, processes, perMember int) (int, error) {
	share := (maxConnections-reserved-inUse-harnessConns)/processes - relayConns
	if share < 4 {
		return 0, fmt.Errorf("chaos: Postgres has too few free connections for %d instances: max_connections %d, %d reserved, %d in use, "+
			"%d kept for the harness, leave %d per instance (pool + %d relay sessions); raise max_connections or lower -instances",
			processes, maxConnections, reserved, inUse, harnessConns, share+relayConns, relayConns)
	}
	return min(perMember+4, share), nil
}

// unconsumed returns the partitions ("topic/partition", sorted) of a group that are not
// consumed again since a member was killed, comparing the group's lag at the kill
// (atKill) with its lag now. A partition is consumed again when a member other than the
// dead one (by member id) owns it, its commit reached the end offset it had at the kill
// (what was produced before the kill is consumed), and either its commit moved since the
// kill or nothing is waiting in it.
func unconsumed(atKill, now kadm.GroupLag, dead string) []string {
	var out []string
	for _, l := range atKill.Sorted() {
		n, ok := now.Lookup(l.Topic, l.Partition)
		name := fmt.Sprintf("%s/%d", l.Topic, l.Partition)
		if !ok || n.Err != nil || n.Member == nil || n.Member.MemberID == dead {
			out = append(out, name)
			continue
		}
		commit, before := max(n.Commit.At, 0), max(l.Commit.At, 0)
		if commit < l.End.Offset || commit == before && commit < n.End.Offset {
			out = append(out, name)
		}
	}
	return out
}

// throughput is what one load at the judged rate gave: confirmed orders per second,
// from the first order's creation to the last confirmation, by the order database.
type throughput struct {
	confirmed  int
	first      time.Time
	last       time.Time
	load       *LoadSummary
	partitions int
}

func (t throughput) perSecond() float64 {
	d := t.last.Sub(t.first).Seconds()
	if t.confirmed == 0 || d <= 0 {
		return 0
	}
	return float64(t.confirmed) / d
}

func (t throughput) String() string {
	s := fmt.Sprintf("%d partitions: %d confirmed in %.1f s = %.1f/s", t.partitions, t.confirmed, t.last.Sub(t.first).Seconds(), t.perSecond())
	if t.load != nil && t.load.Latency.N > 0 {
		s += fmt.Sprintf(" (POST→terminal p50 %.0f ms, p99 %.0f ms)", t.load.Latency.P50ms, t.load.Latency.P99ms)
	}
	return s
}

// runPartitions is the partitions scenario (see partitionsScenario and
// docs/reliability.md, "The chaos suite").
func runPartitions(ctx context.Context, sc Scenario, c Config) (res Result) {
	res = Result{Scenario: sc.Name, Seed: c.Seed, Started: time.Now(), FaultCounts: map[string]int{}, Anomalies: []Anomaly{}}
	defer func() { res.Took = time.Since(res.Started) }()
	fail := func(err error) Result { res.Err = err.Error(); return res }

	inst, many := c.System.Instances, c.System.Partitions
	if inst <= 0 {
		inst = partitionsInstances
	}
	if many <= 0 {
		many = partitionsMany
	}
	few := partitionsFew
	if many <= few {
		return fail(fmt.Errorf("chaos: the partitions scenario compares %d partitions with more; -partitions %d is not more", few, many))
	}
	procs := inst * len(services)
	res.Doc = fmt.Sprintf("%d instances of each service: saturation measured with %d partitions per topic, half of it offered to that system and "+
		"then to one with %d (confirmed/s compared); on the %d-partition system under load, kill -9 of a payment instance, left down until every "+
		"partition of its group is consumed again, then a rolling restart of all %d instances (SIGTERM, exit, start, ready, the next)",
		inst, few, many, many, procs)
	if c.System.MaxConns == 0 {
		// A group reads some of the saga topics and the retry topic of each
		// (consumer.WithRetryTopics): at most twice the saga topics' partitions.
		perMember := (2*len(events.Topics)*many + inst - 1) / inst
		n, why, err := sizePools(ctx, c.System.PostgresURL, procs, perMember)
		if err != nil {
			return fail(err)
		}
		c.System.MaxConns = n
		if c.System.Log != nil {
			fmt.Fprintf(c.System.Log, "chaos: partitions: DATABASE_MAX_CONNS %d per instance (%s)\n", n, why)
		}
	}
	opts := c.System
	opts.Instances = inst

	// The system with few partitions: saturation, then half of it, judged.
	opts.Partitions = few
	a, err := Start(ctx, opts)
	if err != nil {
		return fail(err)
	}
	sat, err := a.saturation(ctx, c)
	if err != nil {
		a.Close()
		return fail(err)
	}
	rate := sat / 2
	res.Saturation, res.Rate = sat, rate
	a.logf("saturation %.1f orders/s with %d partitions: offering %d orders at %.1f/s to %d and then %d partitions", sat, few, c.Orders, rate, few, many)
	tFew, anoms, dlq, orders, err := a.throughputRun(ctx, c, rate, few)
	a.Close()
	if err != nil {
		return fail(err)
	}
	for _, an := range anoms {
		an.Detail = fmt.Sprintf("[%d partitions] %s", few, an.Detail)
		res.Anomalies = append(res.Anomalies, an)
	}
	res.DeadLetters += dlq
	res.Orders += orders
	res.Placed, res.FailedToPlace = addLoad(res.Placed, res.FailedToPlace, tFew.load)

	// The system with many partitions: the same load, then the faults under load.
	opts.Partitions = many
	b, err := Start(ctx, opts)
	if err != nil {
		return fail(err)
	}
	defer b.Close()
	if c.System.KeepDir || c.System.Dir != "" {
		res.Logs = b.Dir() + "/logs"
	}
	judgedFrom := time.Now()
	tMany, err := b.throughput(ctx, c, rate, many)
	if err != nil {
		return fail(err)
	}
	res.Load = tMany.load
	res.Placed, res.FailedToPlace = addLoad(res.Placed, res.FailedToPlace, tMany.load)
	ratio := Figure{Name: fmt.Sprintf("confirmed/s with %d ÷ with %d partitions", many, few), Limit: partitionsMinRatio, AtLeast: true,
		Detail: fmt.Sprintf("%s; %s; %.1f orders/s offered (half the saturation)", tMany, tFew, rate)}
	if tFew.perSecond() > 0 {
		ratio.Value = tMany.perSecond() / tFew.perSecond()
	} else {
		ratio.Missing = true
	}

	r := newRun(b, c.Seed)
	loadCtx, stopLoad := context.WithCancel(ctx)
	var (
		wg     sync.WaitGroup
		faults LoadSummary
	)
	wg.Go(func() { faults = b.loadUntil(ctx, loadCtx.Done(), rate, c.Seed+1000) })
	sleep(ctx, 10*time.Second)
	recovery := r.killAndWatch(ctx, "payment")
	sleep(ctx, 5*time.Second)
	r.rollingRestart(ctx)
	sleep(ctx, 5*time.Second)
	stopLoad()
	wg.Wait()
	res.Placed, res.FailedToPlace = addLoad(res.Placed, res.FailedToPlace, &faults)
	if ctx.Err() != nil {
		return fail(ctx.Err())
	}

	r.mu.Lock()
	res.Faults = append([]Fault(nil), r.faults...)
	r.mu.Unlock()
	for _, f := range res.Faults {
		res.FaultCounts[f.Kind]++
	}
	// The load ends 5 s after the last fault: quiescence is timed from its end.
	quiet, took, prog := b.quiesce(ctx, time.Now(), c.Bound)
	res.Quiesced, res.Quiescence, res.Progress = quiet, took, prog.String()
	res.Orders += prog.orders
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	anoms, dlq, err = b.check(cctx, nil, judgedFrom)
	if err != nil {
		return fail(err)
	}
	if prog.lag > 0 {
		anoms = append(anoms, Anomaly{Invariant: "every event consumed", Detail: fmt.Sprintf("consumer lag %d at the end", prog.lag)})
	}
	deadlined := 0
	for _, an := range anoms {
		if an.Invariant == InvNoDeadline {
			deadlined++
		}
		an.Detail = fmt.Sprintf("[%d partitions] %s", many, an.Detail)
		res.Anomalies = append(res.Anomalies, an)
	}
	res.DeadLetters += dlq
	roll := Figure{Name: fmt.Sprintf("orders cancelled by their deadline, %d partitions, rolling restart of %d instances", many, procs),
		Value: float64(deadlined), Detail: fmt.Sprintf("%s; under the kill and the restarts %d orders placed at %.1f/s, %d shed with 503, %d failed to place",
			rollDetail(res.Faults), faults.Placed, rate, faults.Shed, faults.FailedToPlace)}
	res.Figures = []Figure{ratio, recovery, roll}
	for _, f := range res.Figures[:2] { // the third is an invariant of its own (InvNoDeadline)
		if !f.OK() {
			res.Anomalies = append(res.Anomalies, Anomaly{Invariant: f.Name, Detail: f.String()})
		}
	}
	b.logf("%s", strings.Join(figureLines(res.Figures), "\n"))
	return res
}

func figureLines(fs []Figure) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.String())
	}
	return out
}

// addLoad adds a load's placed and failed orders to the running totals.
func addLoad(placed, failed int, l *LoadSummary) (int, int) {
	if l == nil {
		return placed, failed
	}
	return placed + l.Placed, failed + l.FailedToPlace
}

// sizePools reads the shared Postgres's connection limits and returns poolSize's
// answer, with the numbers it came from.
func sizePools(ctx context.Context, pgURL string, processes, perMember int) (int, string, error) {
	if pgURL == "" {
		pgURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return 0, "", fmt.Errorf("chaos: postgres: %w", err)
	}
	defer conn.Close(ctx)
	var limit, reserved, used int
	if err := conn.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
		current_setting('superuser_reserved_connections')::int, (SELECT count(*) FROM pg_stat_activity)`).Scan(&limit, &reserved, &used); err != nil {
		return 0, "", fmt.Errorf("chaos: postgres connection limits: %w", err)
	}
	n, err := poolSize(limit, reserved, used, processes, perMember)
	return n, fmt.Sprintf("a member owns up to %d partitions; max_connections %d, %d reserved, %d in use, %d instances", perMember, limit, reserved, used, processes), err
}

// throughputRun is throughput followed by the invariants' check (deadline included)
// over the orders of that load; it returns the anomalies, the dead letters and the
// orders in the system.
func (s *System) throughputRun(ctx context.Context, c Config, rate float64, partitions int) (throughput, []Anomaly, int, int, error) {
	from := time.Now()
	t, err := s.throughput(ctx, c, rate, partitions)
	if err != nil {
		return t, nil, 0, 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	anoms, dlq, err := s.check(cctx, nil, from)
	if err != nil {
		return t, nil, 0, 0, err
	}
	var orders int
	if p, err := s.pool(cctx, "order"); err == nil {
		_ = p.QueryRow(cctx, "SELECT count(*) FROM orders").Scan(&orders)
		p.Close()
	}
	return t, anoms, dlq, orders, nil
}

// throughput offers c.Orders orders at rate, waits until the system quiesced, and
// reads the confirmed orders of that load from the order database.
func (s *System) throughput(ctx context.Context, c Config, rate float64, partitions int) (throughput, error) {
	t := throughput{partitions: partitions}
	start := time.Now()
	sum, err := s.load(ctx, c.Orders, rate, c.Seed, c.Bound)
	if err != nil {
		return t, err
	}
	t.load = sum
	if quiet, _, prog := s.quiesce(ctx, time.Now(), c.Bound); !quiet {
		s.logf("throughput with %d partitions: not quiet within %s (%s); counting what was confirmed", partitions, c.Bound, prog)
	}
	p, err := s.pool(ctx, "order")
	if err != nil {
		return t, err
	}
	defer p.Close()
	var first, last *time.Time
	if err := p.QueryRow(ctx, `SELECT count(*), min(created_at), max(state_since) FROM orders
		WHERE state = 'CONFIRMED' AND created_at >= $1`, start.Add(-time.Second)).Scan(&t.confirmed, &first, &last); err != nil {
		return t, fmt.Errorf("chaos: read confirmed orders: %w", err)
	}
	if first != nil && last != nil {
		t.first, t.last = *first, *last
	}
	s.logf("throughput %s", t)
	return t, nil
}

// loadUntil places orders at rate in loads of 10 s each, one after the other, until
// until is closed (the load under way finishes; ctx ends it at once), and returns their
// summed counts.
func (s *System) loadUntil(ctx context.Context, until <-chan struct{}, rate float64, seed uint64) LoadSummary {
	var sum LoadSummary
	n := max(1, int(rate*10))
	for i := uint64(0); ctx.Err() == nil; i++ {
		select {
		case <-until:
			return sum
		default:
		}
		l, err := s.load(ctx, n, rate, seed+i, 0)
		if err != nil {
			s.logf("load under the faults: %v", err)
			sleep(ctx, time.Second)
			continue
		}
		sum.Placed += l.Placed
		sum.FailedToPlace += l.FailedToPlace
		sum.Shed += l.Shed
		sum.PlaceSeconds += l.PlaceSeconds
	}
	return sum
}

// instanceConfig is the kit configuration p runs with (its environment over the
// harness's), as the service reads it.
func instanceConfig(p *proc, svc string) (app.Config, error) {
	env := app.NewEnv(func(key string) (string, bool) {
		for i := len(p.env) - 1; i >= 0; i-- {
			if k, v, ok := strings.Cut(p.env[i], "="); ok && k == key {
				return v, true
			}
		}
		return os.LookupEnv(key)
	})
	cfg := app.LoadConfig(env, svc, "")
	return cfg, env.Err()
}

// killAndWatch kills one instance of svc (drawn with the run's seed) with SIGKILL, leaves
// it down until every partition of its consumer group is consumed again (see
// unconsumed) or the limit plus a minute passed, restarts it, and returns the time to
// consumption as a figure judged against the instance's session time-out plus
// partitionsSlack.
func (r *run) killAndWatch(ctx context.Context, svc string) Figure {
	p := r.s.instances[svc][r.intn(len(r.s.instances[svc]))]
	f := Figure{Name: "every partition of " + svc + "'s group consumed again after kill -9 of " + p.name, Unit: "s"}
	missing := func(err error) Figure { f.Missing, f.Detail = true, err.Error(); return f }
	cfg, err := instanceConfig(p, svc)
	if err != nil {
		return missing(err)
	}
	limit := cfg.KafkaSessionTimeout + partitionsSlack
	f.Limit = limit.Seconds()
	group, member, err := r.s.memberOf(ctx, p.name)
	if err != nil {
		return missing(err)
	}
	lags, err := r.s.adm.Lag(ctx, group)
	if err != nil {
		return missing(fmt.Errorf("chaos: lag of %s: %w", group, err))
	}
	atKill := lags[group].Lag
	owned := 0
	for _, l := range atKill.Sorted() {
		if l.Member != nil && l.Member.MemberID == member {
			owned++
		}
	}
	start := time.Now()
	if err := p.kill9(); err != nil {
		r.record(FaultKill, p.name, "", start, err)
		return missing(err)
	}
	var (
		pending  []string
		took     time.Duration
		polls    int
		consumed bool
	)
	for !consumed {
		lags, err := r.s.adm.Lag(ctx, group)
		if gl := lags[group]; err == nil && gl.Error() == nil {
			polls++
			pending = unconsumed(atKill, gl.Lag, member)
			consumed, took = len(pending) == 0, time.Since(start)
			if consumed {
				break
			}
		}
		if time.Since(start) > limit+time.Minute || !sleep(ctx, 250*time.Millisecond) {
			break
		}
	}
	err = r.s.restart(context.WithoutCancel(ctx), p, 90*time.Second)
	detail := fmt.Sprintf("group %s: %d partitions, %d owned by %s at the kill; session time-out %s (KAFKA_SESSION_TIMEOUT)",
		group, len(atKill.Sorted()), owned, p.name, cfg.KafkaSessionTimeout)
	if !consumed {
		f.Missing = true
		detail += fmt.Sprintf("; %d partitions still not consumed after %s (%d polls), e.g. %s",
			len(pending), time.Since(start).Round(time.Second), polls, strings.Join(pending[:min(5, len(pending))], ", "))
	}
	f.Value, f.Detail = took.Seconds(), detail
	r.record(FaultKill, p.name, fmt.Sprintf("left down until every partition of %s was consumed again (%.1f s), then restarted", group, took.Seconds()), start, err)
	return f
}

// memberOf returns the consumer group and member id of the static member name
// (KAFKA_INSTANCE_ID), from a group description.
func (s *System) memberOf(ctx context.Context, name string) (string, string, error) {
	groups, err := s.groups(ctx)
	if err != nil {
		return "", "", err
	}
	described, err := s.adm.DescribeGroups(ctx, groups...)
	if err != nil {
		return "", "", fmt.Errorf("chaos: describe groups: %w", err)
	}
	for _, g := range described.Sorted() {
		for _, m := range g.Members {
			if m.InstanceID != nil && *m.InstanceID == name {
				return g.Group, m.MemberID, nil
			}
		}
	}
	return "", "", fmt.Errorf("chaos: %s is a member of none of the groups %v", name, groups)
}

// rollingRestart restarts every service instance in turn: SIGTERM, its exit waited for
// (killed after its shutdown time-out plus 10 s), started again and waited for until it
// is ready, then the next.
func (r *run) rollingRestart(ctx context.Context) {
	bg := context.WithoutCancel(ctx) // an instance is never left stopped
	for _, svc := range services {
		for _, p := range r.s.instances[svc] {
			if ctx.Err() != nil {
				return
			}
			grace := 15 * time.Second
			if cfg, err := instanceConfig(p, svc); err == nil {
				grace = cfg.ShutdownTimeout + 10*time.Second
			}
			start := time.Now()
			var exited, ready time.Duration
			err := p.signal(syscall.SIGTERM)
			if err == nil {
				if p.waitExit(grace) {
					exited = time.Since(start)
				} else {
					p.stop(time.Second)
					err = fmt.Errorf("chaos: %s did not exit within %s of SIGTERM; killed", p.name, grace)
				}
				began := time.Now()
				err = errors.Join(err, r.s.restart(bg, p, 90*time.Second))
				ready = time.Since(began)
			}
			r.record(FaultRestart, p.name, fmt.Sprintf("exited %.1f s after SIGTERM, ready %.1f s after its start", exited.Seconds(), ready.Seconds()), start, err)
		}
	}
}

// rollDetail summarizes the rolling restart's faults: how many, the longest exit and
// restart, and any that failed.
func rollDetail(fs []Fault) string {
	var (
		n       int
		longest time.Duration
		failed  []string
	)
	for _, f := range fs {
		if f.Kind != FaultRestart {
			continue
		}
		n++
		longest = max(longest, f.Took)
		if f.Err != "" {
			failed = append(failed, f.Target)
		}
	}
	s := fmt.Sprintf("%d instances restarted one after the other, each down and back ready within %.1f s", n, longest.Seconds())
	if len(failed) > 0 {
		slices.Sort(failed)
		s += "; failed: " + strings.Join(failed, ", ")
	}
	return s
}
