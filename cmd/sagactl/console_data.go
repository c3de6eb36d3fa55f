package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/tracker"
)

// overview is what the overview page shows and /api/overview returns. Each section
// carries its own error, so one unreachable source leaves the others visible.
type overview struct {
	At time.Time `json:"at"`

	States      []stateCount `json:"states"`
	StatesSince string       `json:"states_since,omitempty"` // creation of the oldest order counted
	StatesError string       `json:"states_error,omitempty"`

	Stuck      []stuckOrder `json:"stuck"`
	StuckError string       `json:"stuck_error,omitempty"`

	DeadLetters      []dlqReasonCount `json:"dead_letters"`
	DeadLettersError string           `json:"dead_letters_error,omitempty"`

	Lag      []groupLag `json:"lag"`
	LagError string     `json:"lag_error,omitempty"`

	Outbox      []outboxBacklog `json:"outbox"`
	OutboxError string          `json:"outbox_error,omitempty"`

	// The saga tracker's sections, with -tracker-db only.
	Tracker         bool        `json:"tracker"`
	Sagas           []sagaCount `json:"sagas,omitempty"`
	SagasError      string      `json:"sagas_error,omitempty"`
	StuckSagas      []sagaRow   `json:"stuck_sagas,omitempty"`
	StuckSagasError string      `json:"stuck_sagas_error,omitempty"`
}

type stateCount struct {
	State string `json:"state"`
	Count int64  `json:"count"`
	Stuck int64  `json:"stuck"`
}

type stuckOrder struct {
	ID        string  `json:"id"`
	State     string  `json:"state"`
	Customer  string  `json:"customer"`
	Age       string  `json:"age"`
	AgeSecond float64 `json:"age_seconds"`
	Since     string  `json:"since"`
	Deadline  string  `json:"deadline,omitempty"`
	TraceID   string  `json:"trace_id,omitempty"`
	JaegerURL string  `json:"jaeger_url,omitempty"`
}

type dlqReasonCount struct {
	Topic  string `json:"topic"`
	Reason string `json:"reason"`
	Group  string `json:"group"`
	Count  int    `json:"count"`
}

// groupLag is one consumer group's lag on one topic, with each partition's.
type groupLag struct {
	Group      string         `json:"group"`
	State      string         `json:"state"`
	Topic      string         `json:"topic"`
	Total      int64          `json:"total"`
	Partitions []partitionLag `json:"partitions"`
}

type partitionLag struct {
	Partition int32 `json:"partition"`
	Commit    int64 `json:"commit"`
	End       int64 `json:"end"`
	Lag       int64 `json:"lag"` // -1: unknown (see the group's error)
}

// outboxBacklog is one outbox table's backlog as a service's metrics report it.
type outboxBacklog struct {
	Service   string  `json:"service"`
	Table     string  `json:"table"`
	Rows      float64 `json:"rows"`
	OldestAge float64 `json:"oldest_age_seconds"`
	Leader    bool    `json:"leader"`
	Error     string  `json:"error,omitempty"`
}

// overview gathers every section concurrently.
func (s *console) overview(ctx context.Context) overview {
	ov := overview{At: s.now().UTC()}
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		if ov.States, ov.StatesSince, err = s.stateCounts(ctx); err != nil {
			ov.StatesError = err.Error()
		}
	})
	if s.tr != nil {
		ov.Tracker = true
		wg.Go(func() {
			var err error
			if ov.Sagas, err = s.sagaCounts(ctx); err != nil {
				ov.SagasError = "saga tracker: " + err.Error()
			}
		})
		wg.Go(func() {
			var err error
			if ov.StuckSagas, err = s.findSagas(ctx, tracker.Filter{Status: tracker.StatusStuck, Limit: consoleStuckSagas}); err != nil {
				ov.StuckSagasError = "saga tracker: " + err.Error()
			}
		})
	}
	wg.Go(func() {
		var err error
		if ov.Stuck, err = s.stuckOrders(ctx); err != nil {
			ov.StuckError = err.Error()
		}
	})
	wg.Go(func() {
		var err error
		if ov.DeadLetters, err = s.deadLetterCounts(ctx); err != nil {
			ov.DeadLettersError = err.Error()
		}
	})
	wg.Go(func() {
		var err error
		if ov.Lag, err = s.consumerLag(ctx); err != nil {
			ov.LagError = err.Error()
		}
	})
	wg.Go(func() {
		var err error
		if ov.Outbox, err = s.outboxBacklog(ctx); err != nil {
			ov.OutboxError = err.Error()
		}
	})
	wg.Wait()
	return ov
}

// countsJSON is the answer of the order API's GET /orders/counts.
type countsJSON struct {
	ByState map[string]int64 `json:"by_state"`
	Stuck   map[string]int64 `json:"stuck"`
}

// stateOrder is the order the overview lists states in: the saga's flow.
var stateOrder = []string{"PENDING", "CANCELLING", "CONFIRMED", "REJECTED", "CANCELLED", "COMPENSATION_FAILED"}

// stateCounts reads the orders per state, and the creation time of the oldest order (the
// counts cover every order the order service's database holds, earlier runs included).
func (s *console) stateCounts(ctx context.Context) ([]stateCount, string, error) {
	var c countsJSON
	if err := s.api.do(ctx, http.MethodGet, "/orders/counts", nil, nil, &c); err != nil {
		return nil, "", err
	}
	var out []stateCount
	for _, st := range stateOrder {
		out = append(out, stateCount{State: st, Count: c.ByState[st], Stuck: c.Stuck[st]})
	}
	for _, st := range slices.Sorted(maps.Keys(c.ByState)) { // states this console does not know yet
		if !slices.Contains(stateOrder, st) {
			out = append(out, stateCount{State: st, Count: c.ByState[st], Stuck: c.Stuck[st]})
		}
	}
	// The API lists oldest first: one order is the oldest.
	oldest, err := s.api.List(ctx, url.Values{"limit": {"1"}})
	if err != nil {
		return out, "", err
	}
	since := ""
	if len(oldest) == 1 {
		since = tsString(oldest[0].CreatedAt)
	}
	return out, since, nil
}

// consoleStuckLimit bounds the stuck orders the overview lists (oldest first).
const consoleStuckLimit = 50

func (s *console) stuckOrders(ctx context.Context) ([]stuckOrder, error) {
	orders, err := s.api.List(ctx, url.Values{"stuck": {"true"}, "limit": {strconv.Itoa(consoleStuckLimit)}})
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]stuckOrder, 0, len(orders))
	for _, o := range orders {
		so := stuckOrder{ID: o.ID, State: o.State, Customer: o.CustomerID, AgeSecond: o.Age(now).Seconds(),
			Age: fmtDuration(o.Age(now)), TraceID: o.TraceID, JaegerURL: safeURL(o.JaegerURL)}
		if !o.StateSince.IsZero() {
			so.Since = fmtDuration(now.Sub(o.StateSince)) + " in " + o.State
		}
		if o.DeadlineAt != nil {
			so.Deadline = o.DeadlineAt.UTC().Format(time.RFC3339)
		}
		out = append(out, so)
	}
	// The API lists by creation; the console shows the oldest first whatever it sends.
	slices.SortStableFunc(out, func(a, b stuckOrder) int { return cmp.Compare(b.AgeSecond, a.AgeSecond) })
	return out, nil
}

// dlqTopics lists the dead-letter topics (*.dlq), sorted.
func (k *kafka) dlqTopics(ctx context.Context) ([]string, error) {
	details, err := k.adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("sagactl: list topics: %w", err)
	}
	var out []string
	for _, name := range details.Names() {
		if strings.HasSuffix(name, consumer.DeadLetterSuffix) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// deadLetterCounts counts the dead letters of every dead-letter topic by reason and
// group, each once however many copies of it the topic holds (dedupe).
// A topic is read again only when its offsets moved since the last count.
func (s *console) deadLetterCounts(ctx context.Context) ([]dlqReasonCount, error) {
	k, err := s.kafka(ctx)
	if err != nil {
		return nil, err
	}
	topics, err := k.dlqTopics(ctx)
	if err != nil {
		return nil, err
	}
	var out []dlqReasonCount
	for _, t := range topics {
		b, err := k.bounds(ctx, t)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		memo, ok := s.dlqMemo[t]
		s.mu.Unlock()
		if !ok || !maps.Equal(memo.ends, b) {
			recs, err := k.readDLQ(ctx, t)
			if err != nil {
				return nil, err
			}
			memo = dlqCount{ends: b, counts: countByReason(t, recs)}
			s.mu.Lock()
			s.dlqMemo[t] = memo
			s.mu.Unlock()
		}
		out = append(out, memo.counts...)
	}
	return out, nil
}

func countByReason(topic string, recs []dlqRecord) []dlqReasonCount {
	type key struct{ reason, group string }
	n := make(map[key]int)
	for _, r := range recs {
		n[key{orDash(r.Reason), orDash(r.Group)}]++
	}
	out := make([]dlqReasonCount, 0, len(n))
	for k, c := range n {
		out = append(out, dlqReasonCount{Topic: topic, Reason: k.reason, Group: k.group, Count: c})
	}
	slices.SortFunc(out, func(a, b dlqReasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.Group, b.Group))
	})
	return out
}

// consumerLag is every consumer group's lag per topic and partition (kadm.Lag).
func (s *console) consumerLag(ctx context.Context) ([]groupLag, error) {
	k, err := s.kafka(ctx)
	if err != nil {
		return nil, err
	}
	listed, err := k.adm.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("sagactl: list groups: %w", err)
	}
	groups := listed.Groups()
	if len(groups) == 0 {
		return nil, nil
	}
	lags, err := k.adm.Lag(ctx, groups...)
	if err != nil {
		return nil, fmt.Errorf("sagactl: consumer lag: %w", err)
	}
	var out []groupLag
	var errs []string
	for _, g := range slices.Sorted(maps.Keys(lags)) {
		dl := lags[g]
		if err := dl.Error(); err != nil {
			errs = append(errs, g+": "+err.Error())
			continue
		}
		for _, topic := range slices.Sorted(maps.Keys(dl.Lag)) {
			gl := groupLag{Group: g, State: dl.State, Topic: topic}
			parts := dl.Lag[topic]
			for _, p := range slices.Sorted(maps.Keys(parts)) {
				ml := parts[p]
				gl.Partitions = append(gl.Partitions, partitionLag{Partition: p, Commit: ml.Commit.At, End: ml.End.Offset, Lag: ml.Lag})
				if ml.Lag > 0 {
					gl.Total += ml.Lag
				}
			}
			out = append(out, gl)
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("sagactl: consumer lag: %s", strings.Join(errs, "; "))
	}
	return out, nil
}

// Prometheus names of the outbox relay's gauges (outbox.MetricBacklog and friends as the
// OpenTelemetry Prometheus exporter writes them).
const (
	promOutboxBacklog = "choreo_outbox_backlog"
	promOutboxOldest  = "choreo_outbox_oldest_age"
	promOutboxLeader  = "choreo_outbox_leader"
)

// outboxBacklog scrapes each service's /metrics for the outbox gauges.
func (s *console) outboxBacklog(ctx context.Context) ([]outboxBacklog, error) {
	out := make([][]outboxBacklog, len(s.targets))
	var wg sync.WaitGroup
	for i, t := range s.targets {
		wg.Go(func() {
			rows, err := s.scrapeOutbox(ctx, t)
			if err != nil {
				rows = []outboxBacklog{{Service: t.Service, Error: err.Error()}}
			}
			out[i] = rows
		})
	}
	wg.Wait()
	return slices.Concat(out...), nil
}

func (s *console) scrapeOutbox(ctx context.Context, t metricsTarget) ([]outboxBacklog, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("sagactl: metrics of %s: %w", t.Service, withoutURL(err))
	}
	req.Header.Set("Accept", "text/plain")
	if s.metricsToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.metricsToken)
	}
	resp, err := s.metrics.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics of %s at %s: %w", t.Service, redactURL(t.URL), withoutURL(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		return nil, fmt.Errorf("metrics of %s at %s: HTTP 401: the service requires its ADMIN_TOKEN (-metrics-token or ADMIN_TOKEN)", t.Service, redactURL(t.URL))
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics of %s at %s: HTTP %d", t.Service, redactURL(t.URL), resp.StatusCode)
	}
	byTable := make(map[string]*outboxBacklog)
	samples, err := parseProm(io.LimitReader(resp.Body, 16<<20), promOutboxBacklog, promOutboxOldest, promOutboxLeader)
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", t.Service, err)
	}
	for _, sm := range samples {
		table := cmp.Or(sm.labels["table"], sm.labels["outbox_table"], "outbox")
		b := byTable[table]
		if b == nil {
			b = &outboxBacklog{Service: t.Service, Table: table}
			byTable[table] = b
		}
		switch {
		case strings.HasPrefix(sm.name, promOutboxBacklog):
			b.Rows = sm.value
		case strings.HasPrefix(sm.name, promOutboxOldest):
			b.OldestAge = sm.value
		case strings.HasPrefix(sm.name, promOutboxLeader):
			b.Leader = b.Leader || sm.value == 1
		}
	}
	if len(byTable) == 0 {
		return []outboxBacklog{{Service: t.Service, Error: "no " + promOutboxBacklog + " in its metrics (no outbox relay running?)"}}, nil
	}
	out := make([]outboxBacklog, 0, len(byTable))
	for _, table := range slices.Sorted(maps.Keys(byTable)) {
		out = append(out, *byTable[table])
	}
	return out, nil
}

// promSample is one sample line of the Prometheus text format.
type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseProm reads the samples whose metric name starts with one of prefixes from the
// Prometheus text exposition format: "name{k="v",...} value [timestamp]". It is
// deliberately minimal: comments are skipped, label values are unescaped (\\, \", \n).
func parseProm(r io.Reader, prefixes ...string) ([]promSample, error) {
	var out []promSample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(line, p) }) {
			continue
		}
		sm, ok := parsePromLine(line)
		if ok {
			out = append(out, sm)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

func parsePromLine(line string) (promSample, bool) {
	sm := promSample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return sm, false
	}
	sm.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " ,")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.IndexByte(line, '=')
			if eq <= 0 || len(line) < eq+2 || line[eq+1] != '"' {
				return sm, false
			}
			name := strings.TrimSpace(line[:eq])
			line = line[eq+2:]
			var v strings.Builder
			closed := false
			for j := 0; j < len(line); j++ {
				c := line[j]
				if c == '\\' && j+1 < len(line) {
					j++
					switch line[j] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(line[j])
					}
					continue
				}
				if c == '"' {
					line = line[j+1:]
					closed = true
					break
				}
				v.WriteByte(c)
			}
			if !closed {
				return sm, false
			}
			sm.labels[name] = v.String()
		}
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return sm, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return sm, false
	}
	sm.value = v
	return sm, true
}

// safeURL returns u if it is an absolute http(s) URL and "" otherwise, so a link the
// console draws from an API answer can never be javascript: or data:.
func safeURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return ""
	}
	return u
}
