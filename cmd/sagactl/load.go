package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/services/events"
)

// loadConfig is the parsed `sagactl load` command line.
type loadConfig struct {
	n           int
	rate        float64
	mix         mix
	customers   int
	skus        []string
	poor, hang  string
	rare        string
	wait        time.Duration
	concurrency int
	pollEvery   time.Duration
	waitStuck   bool
	seed        uint64
	poison      int  // records that are not events, produced to orders.events
	noInspect   bool // print no command to inspect the unsettled orders (-inspect=false)
}

// loadOrder is one order of a load run.
type loadOrder struct {
	Kind        kind   `json:"kind"`
	ID          string `json:"id,omitempty"`
	PlaceErr    string `json:"place_error,omitempty"`
	CancelLate  bool   `json:"cancel_too_late,omitempty"` // the cancel found the order already settled
	CancelErr   string `json:"cancel_error,omitempty"`
	Final       Order  `json:"-"`
	State       string `json:"state,omitempty"`
	settled     bool
	req         PlaceOrderRequest
	idempotency string
}

// request builds the order for k.
func (c loadConfig) request(k kind, rng *rand.Rand) PlaceOrderRequest {
	customer := fmt.Sprintf("c-%d", 1+rng.IntN(c.customers))
	sku := c.skus[rng.IntN(len(c.skus))]
	qty := 1 + rng.IntN(3)
	switch k {
	case kindDecline:
		customer = c.poor
	case kindOOS:
		sku = c.rare
	case kindStuck:
		customer = c.hang
	}
	return PlaceOrderRequest{
		CustomerID: customer,
		Items:      []Item{{SKU: sku, Qty: qty}},
		Amount:     int64(qty) * int64(500+rng.IntN(4500)),
	}
}

// expected reports whether the final state is what the order's kind aims for.
func (o *loadOrder) expected() bool {
	switch o.Kind {
	case kindSuccess:
		return o.State == "CONFIRMED"
	case kindDecline, kindOOS:
		return o.State == "REJECTED"
	case kindCancel:
		return o.State == "CANCELLED" || o.CancelLate && terminal(o.State)
	case kindStuck:
		return !terminal(o.State)
	}
	return false
}

func parseLoad(args []string, std stdio) (conn, loadConfig, error) {
	var (
		c       conn
		lc      loadConfig
		mixStr  string
		skusStr string
		seed    int64
	)
	fs := newFlagSet("load", std, &c)
	fs.IntVar(&lc.n, "n", 200, "number of orders")
	fs.Float64Var(&lc.rate, "rate", 50, "orders placed per second")
	fs.StringVar(&mixStr, "mix", defaultMix, "order `kinds`: success, decline, oos and cancel are weights; stuck is a count of orders")
	fs.IntVar(&lc.customers, "customers", 100, "successful orders use customers c-1..c-`N`")
	fs.StringVar(&skusStr, "skus", "sku-1,sku-2,sku-3,sku-4,sku-5", "comma-separated stocked `SKUs`")
	fs.StringVar(&lc.poor, "poor-customer", "c-poor", "`customer` whose payments are declined (decline)")
	fs.StringVar(&lc.hang, "hang-customer", "c-hang", "`customer` the payment service leaves hanging (stuck; PAYMENT_HANG_CUSTOMERS on payment)")
	fs.StringVar(&lc.rare, "rare-sku", "sku-rare", "`SKU` without stock (oos)")
	durationVar(fs, &lc.wait, "wait", 2*time.Minute, "after the last order is placed, wait at most this long for orders to settle")
	fs.IntVar(&lc.concurrency, "concurrency", 64, "requests in flight at most (placing falls behind -rate when -rate × the POST latency exceeds it; the summary says so)")
	fs.BoolVar(&lc.waitStuck, "wait-stuck", true, "also wait (within -wait) until the order service flags the stuck-kind orders as stuck")
	durationVar(fs, &lc.pollEvery, "poll", 200*time.Millisecond, "how often to check progress (settlement comes from the order events on -brokers; a check is at most two list queries)")
	fs.IntVar(&lc.poison, "poison", 0, "also produce `n` records that are not events to orders.events, which its consumers dead-letter (something real for the dead-letter views)")
	inspect := fs.Bool("inspect", true, "print the command that inspects each unsettled order (make demo turns it off when it stops the services after the run)")
	fs.Int64Var(&seed, "seed", 0, "random seed for the order mix and contents (0: from the clock; printed)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: sagactl load [flags]

Places -n orders through the order API at -rate per second, a mix of kinds:
  success  a customer c-1..c-N buys stocked SKUs              -> CONFIRMED
  decline  the poor customer (declined by payment)             -> REJECTED (payment.declined)
  oos      an SKU without stock (paid, then refunded)          -> REJECTED (payment.refunded or stock.unavailable, whichever arrives last)
  cancel   cancelled right after it was placed                 -> CANCELLED
  stuck    the customer payment leaves hanging                 -> stays PENDING, shown as stuck
then waits until every order settles (stuck ones excepted; with -wait-stuck also until
the service flags those as stuck, e.g. 30s for a PENDING order) and prints the outcome per
state with saga latency p50/p95/p99 (created_at to the final transition, by the order
service's clock) and the stuck orders with their trace ids. Exit 1 if an order could not
be placed or did not settle within -wait. Settlement is read from the order service's
events on -brokers (KAFKA_BROKERS), so waiting costs the services nothing per order.

Flags:`)
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return c, lc, err
	}
	if len(pos) > 0 {
		return c, lc, fmt.Errorf("%w: load takes no arguments, got %q", errUsage, pos)
	}
	lc.noInspect = !*inspect
	if lc.mix, err = parseMix(mixStr); err != nil {
		return c, lc, fmt.Errorf("%w: %w", errUsage, err)
	}
	if _, err := lc.mix.counts(lc.n); err != nil {
		return c, lc, fmt.Errorf("%w: %w", errUsage, err)
	}
	for s := range strings.SplitSeq(skusStr, ",") {
		if s = strings.TrimSpace(s); s != "" {
			lc.skus = append(lc.skus, s)
		}
	}
	switch {
	case lc.rate <= 0:
		return c, lc, fmt.Errorf("%w: -rate must be > 0", errUsage)
	case lc.customers < 1:
		return c, lc, fmt.Errorf("%w: -customers must be >= 1", errUsage)
	case len(lc.skus) == 0:
		return c, lc, fmt.Errorf("%w: -skus is empty", errUsage)
	case lc.concurrency < 1:
		return c, lc, fmt.Errorf("%w: -concurrency must be >= 1", errUsage)
	case lc.poison < 0:
		return c, lc, fmt.Errorf("%w: -poison must be >= 0", errUsage)
	case lc.pollEvery <= 0 || lc.wait < 0:
		return c, lc, fmt.Errorf("%w: -poll must be > 0 and -wait >= 0", errUsage)
	}
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	lc.seed = uint64(seed)
	return c, lc, nil
}

// cmdLoad is `sagactl load`.
func cmdLoad(ctx context.Context, args []string, std stdio) error {
	c, lc, err := parseLoad(args, std)
	if err != nil {
		return err
	}
	api, err := c.orderAPI()
	if err != nil {
		return err
	}
	// Fail fast, with exit code 3, when the order service is not there.
	if _, err := api.List(ctx, url.Values{"limit": {"1"}}); err != nil {
		return err
	}
	k, err := dialKafka(ctx, c)
	if err != nil {
		return err
	}
	defer k.close()
	rng := rand.New(rand.NewPCG(lc.seed, lc.seed>>1|1))
	plan, err := lc.mix.plan(lc.n, rng)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	orders := make([]*loadOrder, len(plan))
	for i, k := range plan {
		orders[i] = &loadOrder{Kind: k, req: lc.request(k, rng), idempotency: uuid.NewString()}
	}
	r := &loadRun{cfg: lc, api: api, orderURL: c.orderURL, self: std.name(), orders: orders, start: time.Now()}
	stopWatch, err := r.startWatch(ctx, k)
	if err != nil {
		return err
	}
	poison, err := producePoison(ctx, k, lc.poison)
	if err != nil {
		stopWatch()
		return err
	}
	prog := newProgress(std.err, std.terminal, len(orders))
	fmt.Fprintf(std.err, "sagactl load: %d orders at %g/s against %s (mix %s, seed %d)\n",
		lc.n, lc.rate, redactURL(c.orderURL), lc.mix, int64(lc.seed))
	runErr := r.run(ctx, prog)
	stopWatch()
	prog.finish(r.snapshot())
	sum := r.summary()
	sum.Poison = poison
	if len(poison) > 0 && !lc.noInspect {
		sum.InspectPoison = std.name() + " dlq list " + events.TopicOrders
		if c.brokers != defaultBrokers {
			sum.InspectPoison += " -brokers " + c.brokers
		}
	}
	if c.json {
		if err := writeJSON(std.out, sum); err != nil {
			return err
		}
	} else if err := renderSummary(std.out, sum); err != nil {
		return err
	}
	switch {
	case runErr != nil:
		return runErr
	case sum.FailedToPlace > 0 || sum.Unsettled > 0:
		return fmt.Errorf("%w: %d order(s) not placed, %d not settled within -wait %s",
			errIncomplete, sum.FailedToPlace, sum.Unsettled, lc.wait)
	}
	return nil
}

// loadRun is the state of one load run.
type loadRun struct {
	cfg      loadConfig
	api      *orderAPI
	orderURL string
	self     string // the command that runs sagactl (stdio.name)
	orders   []*loadOrder
	start    time.Time

	mu                          sync.Mutex
	watch                       settlement
	placed, failed, settled     int
	shed                        int // POSTs still answered 503 (admission control) after the retries
	placeElapsed, settleElapsed time.Duration
}

// counts is a progress snapshot. aging counts the stuck-kind orders still waiting to be
// flagged stuck once every other order has settled (the run waits for them only then).
type counts struct{ total, placed, failed, settled, aging int }

func (r *loadRun) snapshot() counts {
	aging := 0
	if r.cfg.waitStuck && r.waitingFor() == 0 {
		aging = r.unflagged()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.placed+r.failed < len(r.orders) {
		aging = 0
	}
	return counts{len(r.orders), r.placed, r.failed, r.settled, aging}
}

func (r *loadRun) run(ctx context.Context, prog *progress) error {
	placing := make(chan struct{})
	go func() {
		defer close(placing)
		r.place(ctx)
	}()
	tick := time.NewTicker(r.cfg.pollEvery)
	defer tick.Stop()
	var deadline <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if placing != nil {
				<-placing
			}
			return fmt.Errorf("sagactl: load interrupted: %w", ctx.Err())
		case <-placing:
			placing = nil
			deadline = time.After(r.cfg.wait)
		case <-deadline:
			r.fetchUnsettled(ctx)
			return nil
		case <-tick.C:
			// Settlement comes from the order events; a tick makes at most two list
			// queries (see settle.go), never one request per order.
			waiting := r.waitingFor()
			othersDone := placing == nil && waiting == 0
			r.poll(ctx, waiting > 0, othersDone && r.cfg.waitStuck)
			prog.update(r.snapshot())
			if !othersDone {
				continue
			}
			if !r.cfg.waitStuck || r.unflagged() == 0 {
				r.fetchUnsettled(ctx) // the stuck ones, for their final state
				return nil
			}
		}
	}
}

// place places every order at the configured rate, at most concurrency at a time.
func (r *loadRun) place(ctx context.Context) {
	interval := time.Duration(float64(time.Second) / r.cfg.rate)
	sem := make(chan struct{}, r.cfg.concurrency)
	var wg sync.WaitGroup
	next := time.Now()
	for _, o := range r.orders {
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		next = next.Add(interval)
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r.placeOne(ctx, o)
		}()
	}
	wg.Wait()
	r.mu.Lock()
	r.placeElapsed = time.Since(r.start)
	r.mu.Unlock()
}

func (r *loadRun) placeOne(ctx context.Context, o *loadOrder) {
	var (
		placed Order
		err    error
	)
	// The idempotency key makes retrying a request that may have reached the service safe.
	for attempt := range 3 {
		placed, err = r.api.Place(ctx, o.req, o.idempotency)
		if err == nil || ctx.Err() != nil || !retryablePlace(err) {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
	var cancelErr error
	cancelLate := false
	if err == nil && o.Kind == kindCancel {
		if _, cerr := r.api.Cancel(ctx, placed.ID); cerr != nil {
			if isAPICode(cerr, "invalid_transition") {
				cancelLate = true
			} else {
				cancelErr = cerr
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		o.PlaceErr = err.Error()
		if isShed(err) {
			r.shed++
			return
		}
		r.failed++
		return
	}
	o.ID, o.State, o.Final, o.CancelLate = placed.ID, placed.State, placed, cancelLate
	if cancelErr != nil {
		o.CancelErr = cancelErr.Error()
	}
	r.placed++
	r.registerLocked(o)
}

// isShed reports whether the order API shed the request (503 from its admission
// control): it did nothing, and is counted apart from failures.
func isShed(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable
}

func retryablePlace(err error) bool {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status >= 500
	}
	return errors.Is(err, errUnreachable)
}

// waitingFor counts placed orders that are not settled, stuck-kind orders excepted.
func (r *loadRun) waitingFor() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.orders {
		if o.ID != "" && !o.settled && o.Kind != kindStuck {
			n++
		}
	}
	return n
}

// unflagged counts placed stuck-kind orders the service does not flag as stuck yet and
// that have not settled.
func (r *loadRun) unflagged() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.orders {
		if o.ID != "" && o.Kind == kindStuck && !o.settled && !o.Final.Stuck {
			n++
		}
	}
	return n
}

// name is the command that runs sagactl.
func (r *loadRun) name() string {
	if r.self == "" {
		return "sagactl"
	}
	return r.self
}

// inspect is the command that shows one order, with -order-url when it is not the default.
func (r *loadRun) inspect(id string) string {
	if r.cfg.noInspect {
		return ""
	}
	if r.orderURL == "" || r.orderURL == defaultOrderURL {
		return r.name() + " order " + id
	}
	return r.name() + " order " + id + " -order-url " + redactURL(r.orderURL)
}

// loadSummary is what load prints (and emits with -json).
type loadSummary struct {
	Orders        int     `json:"orders"`
	Mix           string  `json:"mix"`
	Seed          int64   `json:"seed"`
	Rate          float64 `json:"rate"`
	Placed        int     `json:"placed"`
	FailedToPlace int     `json:"failed_to_place"`
	Shed          int     `json:"shed"` // answered 503 by the order API's admission control, after the retries
	Settled       int     `json:"settled"`
	Unsettled     int     `json:"unsettled"` // not settled, stuck-kind orders excepted
	PlaceSeconds  float64 `json:"place_seconds"`
	// BehindSchedule: placing took more than 10% (and 1 s) longer than -n / -rate, so
	// the offered rate was lower than asked (the -concurrency bound was reached).
	BehindSchedule bool             `json:"behind_schedule,omitempty"`
	Concurrency    int              `json:"concurrency"`
	SettleSeconds  float64          `json:"settle_seconds"`
	Outcomes       []outcomeSummary `json:"outcomes"`
	Latency        latencies        `json:"latency"`
	Unexpected     []orderBrief     `json:"unexpected"`
	Stuck          []orderBrief     `json:"stuck"` // every order not settled at the end, oldest first
	PlaceErrors    []string         `json:"place_errors,omitempty"`
	StuckDidSettle int              `json:"stuck_kind_settled"` // stuck-kind orders that settled anyway
	// Poison are the positions (partition:offset) of the records -poison produced.
	Poison []string `json:"poison,omitempty"`
	// Inspect, when set, shows the dead letters of the poison records.
	InspectPoison string `json:"inspect_poison,omitempty"`
}

type outcomeSummary struct {
	Outcome string    `json:"outcome"`
	Count   int       `json:"count"`
	Latency latencies `json:"latency"`
}

type orderBrief struct {
	ID         string  `json:"id"`
	Kind       kind    `json:"kind"`
	State      string  `json:"state"`
	Flagged    bool    `json:"stuck"` // the order service flags it stuck (past its deadline)
	AgeSeconds float64 `json:"age_seconds"`
	TraceID    string  `json:"trace_id"`
	JaegerURL  string  `json:"jaeger_url,omitempty"`
	Inspect    string  `json:"inspect"`
}

// outcome names an order's final state for the summary: the state, with the cause
// event for rejections (declined vs refunded); for an unsettled order "STUCK in <state>"
// once the service flags it stuck, "IN FLIGHT (<state>)" before.
func outcome(o Order) string {
	switch {
	case !terminal(o.State) && o.Stuck:
		return "STUCK in " + o.State
	case !terminal(o.State):
		return "IN FLIGHT (" + o.State + ")"
	case o.State == "REJECTED" || o.State == "COMPENSATION_FAILED":
		if c := o.Cause(); c != "" {
			return o.State + " (" + c + ")"
		}
	}
	return o.State
}

func (r *loadRun) summary() loadSummary {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resolveCausesLocked()
	now := time.Now()
	s := loadSummary{
		Orders: len(r.orders), Mix: r.cfg.mix.String(), Seed: int64(r.cfg.seed), Rate: r.cfg.rate,
		Placed: r.placed, FailedToPlace: r.failed, Shed: r.shed, Settled: r.settled,
		PlaceSeconds: r.placeElapsed.Seconds(), SettleSeconds: r.settleElapsed.Seconds(),
		Unexpected: []orderBrief{}, Stuck: []orderBrief{}, Concurrency: r.cfg.concurrency,
	}
	if want := float64(len(r.orders)) / r.cfg.rate; r.placeElapsed.Seconds() > max(1.1*want, want+1) {
		s.BehindSchedule = true
	}
	by := make(map[string][]time.Duration)
	counts := make(map[string]int)
	var all []time.Duration
	for _, o := range r.orders {
		if o.ID == "" {
			if len(s.PlaceErrors) < 5 {
				s.PlaceErrors = append(s.PlaceErrors, o.PlaceErr)
			}
			continue
		}
		name := outcome(o.Final)
		counts[name]++
		if d, ok := o.Final.SettledIn(); ok {
			by[name] = append(by[name], d)
			all = append(all, d)
		}
		brief := orderBrief{ID: o.ID, Kind: o.Kind, State: o.State, Flagged: o.Final.Stuck, AgeSeconds: o.Final.Age(now).Seconds(),
			TraceID: o.Final.TraceID, JaegerURL: o.Final.JaegerURL, Inspect: r.inspect(o.ID)}
		switch {
		case !terminal(o.State):
			s.Stuck = append(s.Stuck, brief)
			if o.Kind != kindStuck {
				s.Unsettled++
			}
		case o.Kind == kindStuck:
			s.StuckDidSettle++
		}
		if !o.expected() && terminal(o.State) {
			s.Unexpected = append(s.Unexpected, brief)
		}
	}
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b)) })
	for _, n := range names {
		s.Outcomes = append(s.Outcomes, outcomeSummary{Outcome: n, Count: counts[n], Latency: summarize(by[n])})
	}
	s.Latency = summarize(all)
	slices.SortFunc(s.Stuck, func(a, b orderBrief) int { return cmp.Compare(b.AgeSeconds, a.AgeSeconds) })
	return s
}

// perSecond formats a rate as " (12.3/s)", or "" when it cannot be computed.
func perSecond(n int, seconds float64) string {
	if n == 0 || seconds <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%.1f/s)", float64(n)/seconds)
}

func renderSummary(w io.Writer, s loadSummary) error {
	fmt.Fprintf(w, "\n%d orders placed (%d failed) in %.1fs%s; %d settled in %.1fs%s\n\n",
		s.Placed, s.FailedToPlace, s.PlaceSeconds, perSecond(s.Placed, s.PlaceSeconds),
		s.Settled, s.SettleSeconds, perSecond(s.Settled, s.SettleSeconds))
	t := newTable("OUTCOME", "ORDERS", "P50", "P95", "P99").right(1, 2, 3, 4)
	for _, o := range s.Outcomes {
		t.add(o.Outcome, strconv.Itoa(o.Count), fmtLatency(o.Latency.P50, o.Latency.N),
			fmtLatency(o.Latency.P95, o.Latency.N), fmtLatency(o.Latency.P99, o.Latency.N))
	}
	if s.Shed > 0 {
		t.add("shed (503)", strconv.Itoa(s.Shed), "-", "-", "-")
	}
	if s.FailedToPlace > 0 {
		t.add("failed to place", strconv.Itoa(s.FailedToPlace), "-", "-", "-")
	}
	t.add("all settled", strconv.Itoa(s.Latency.N), fmtLatency(s.Latency.P50, s.Latency.N),
		fmtLatency(s.Latency.P95, s.Latency.N), fmtLatency(s.Latency.P99, s.Latency.N))
	if err := t.render(w); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nlatency: created_at to the final transition, by the order service's clock")
	if s.BehindSchedule && s.Placed > 0 {
		fmt.Fprintf(w, "note: placing ran behind -rate %g/s (%.1f/s): the order API answered too slowly for -concurrency %d requests in flight; raise -concurrency to offer the full rate\n",
			s.Rate, float64(s.Placed+s.FailedToPlace)/s.PlaceSeconds, s.Concurrency)
	}
	for _, e := range s.PlaceErrors {
		printf(w, "place error: %s\n", e)
	}
	if len(s.Unexpected) > 0 {
		fmt.Fprintf(w, "\n%d order(s) ended other than their kind aims for:\n", len(s.Unexpected))
		u := newTable("ORDER", "KIND", "STATE")
		for _, o := range s.Unexpected[:min(len(s.Unexpected), 10)] {
			u.add(o.ID, string(o.Kind), o.State)
		}
		if err := u.render(w); err != nil {
			return err
		}
	}
	if s.StuckDidSettle > 0 {
		fmt.Fprintf(w, "\nnote: %d order(s) meant to hang settled anyway: does PAYMENT_HANG_CUSTOMERS on the payment service list the -hang-customer?\n", s.StuckDidSettle)
	}
	if len(s.Poison) > 0 {
		fmt.Fprintf(w, "\n%d record(s) that are not events produced to %s at %s: its consumers dead-letter them",
			len(s.Poison), events.TopicOrders, strings.Join(s.Poison, ", "))
		if s.InspectPoison != "" {
			fmt.Fprintf(w, " (see %s)", s.InspectPoison)
		}
		fmt.Fprintln(w)
	}
	if len(s.Stuck) == 0 {
		_, err := fmt.Fprintln(w, "\nno stuck orders")
		return err
	}
	fmt.Fprintf(w, "\n%d order(s) not settled:\n", len(s.Stuck))
	st := newTable("ORDER", "KIND", "STATE", "STUCK", "AGE", "TRACE ID", "INSPECT").right(4)
	for _, o := range s.Stuck {
		flagged := "not yet"
		if o.Flagged {
			flagged = "yes"
		}
		st.add(o.ID, string(o.Kind), o.State, flagged, fmtAge(time.Duration(o.AgeSeconds*float64(time.Second))), orDash(o.TraceID), orDash(o.Inspect))
	}
	if err := st.render(w); err != nil {
		return err
	}
	if o := s.Stuck[0]; o.JaegerURL != "" {
		_, err := printf(w, "\ntrace of %s: %s\n", o.ID, o.JaegerURL)
		return err
	}
	return nil
}

// producePoison produces n records that are not events (no CloudEvents headers, a
// plain-text value) to orders.events and returns their positions as partition:offset.
// Every consumer group of the topic dead-letters them as malformed.
func producePoison(ctx context.Context, k *kafka, n int) ([]string, error) {
	var pos []string
	for i := range n {
		rec := &kgo.Record{Topic: events.TopicOrders, Key: []byte(fmt.Sprintf("poison-%d", i)),
			Value: []byte("not an event: a poison record of sagactl load -poison")}
		if err := k.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return pos, fmt.Errorf("sagactl: load: produce a poison record to %s: %w", events.TopicOrders, err)
		}
		pos = append(pos, fmt.Sprintf("%d:%d", rec.Partition, rec.Offset))
	}
	return pos, nil
}
