package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Bounds of the trace waterfall.
const (
	consoleTraceSpans    = 300     // spans drawn (the trace may have more)
	consoleTraceBytes    = 8 << 20 // largest query API answer read
	consoleTraceMaxDepth = 12      // deeper spans are drawn at this indent
	consoleTraceLabel    = 48      // runes of "service operation" in a row's label
)

// Layout of the waterfall, in SVG user units.
const (
	wfLabelW = 330 // label column
	wfBarsW  = 600 // bar area
	wfRowH   = 20
	wfTop    = 24
	wfIndent = 10
)

// errNoTrace is the query API answering that it has no such trace.
var errNoTrace = errors.New("jaeger has no such trace")

// jaegerTrace is the part of a trace of Jaeger's query API (GET /api/traces/{id}) the
// console reads.
type jaegerTrace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		SpanID        string      `json:"spanID"`
		OperationName string      `json:"operationName"`
		References    []jaegerRef `json:"references"`
		StartTime     int64       `json:"startTime"` // µs since the epoch
		Duration      int64       `json:"duration"`  // µs
		ProcessID     string      `json:"processID"`
		Tags          []jaegerTag `json:"tags"`
	} `json:"spans"`
	Processes map[string]jaegerProcess `json:"processes"`
}

// jaegerRef is a span's reference to another span (CHILD_OF, FOLLOWS_FROM).
type jaegerRef struct {
	RefType string `json:"refType"`
	SpanID  string `json:"spanID"`
}

type jaegerProcess struct {
	ServiceName string `json:"serviceName"`
}

// jaegerTag is a span's tag: a string, bool, number or binary value.
type jaegerTag struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

// waterfall is a trace laid out as an SVG span waterfall: one row per span, depth-first
// from the roots in start order, each indented by its nesting and drawn as a bar from its
// start offset for its duration on the trace's time scale.
type waterfall struct {
	TraceID       string
	UIURL         string // the trace in the Jaeger UI; "" without -jaeger-ui
	Error         string // why there is no waterfall
	Services      []string
	Duration      string
	Width, Height int
	Rows          []wfRow
	Drawn, Total  int
}

type wfRow struct {
	Service, Operation      string
	Label                   string // service and operation, indented and cut to fit
	Offset, Dur             string
	Y, LabelX               int
	BarX, BarY, BarW, TextX int
	Class                   string // svc0..svc5 by service, plus " err" for a span with an error
}

// jaegerClient reads traces from Jaeger's query API (-jaeger-query).
type jaegerClient struct {
	query  string // base URL of the query API, without the trailing slash
	ui     string // base URL of the Jaeger UI, or ""
	client *http.Client
}

func newJaegerClient(query, ui string, timeout time.Duration) (*jaegerClient, error) {
	for name, u := range map[string]string{"-jaeger-query": query, "-jaeger-ui": ui} {
		if u == "" {
			continue
		}
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return nil, fmt.Errorf("%w: %s %q must be an http(s)://host:port URL", errUsage, name, redactURL(u))
		}
	}
	if query == "" {
		return nil, nil
	}
	return &jaegerClient{query: strings.TrimRight(query, "/"), ui: strings.TrimRight(ui, "/"), client: &http.Client{Timeout: timeout}}, nil
}

// validTraceID is a trace id as W3C trace context and Jaeger write it: 1 to 32 hex digits.
func validTraceID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	for _, c := range id {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}

// fetch reads one trace from the query API.
func (j *jaegerClient) fetch(ctx context.Context, traceID string) (jaegerTrace, error) {
	u := j.query + "/api/traces/" + url.PathEscape(traceID)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return jaegerTrace{}, fmt.Errorf("jaeger query: %w", err)
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return jaegerTrace{}, fmt.Errorf("jaeger query: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return jaegerTrace{}, errNoTrace
	}
	if resp.StatusCode != http.StatusOK {
		return jaegerTrace{}, fmt.Errorf("jaeger query: GET %s: %s", redactURL(u), resp.Status)
	}
	var body struct {
		Data []jaegerTrace `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, consoleTraceBytes)).Decode(&body); err != nil {
		return jaegerTrace{}, fmt.Errorf("jaeger query: GET %s: %w", redactURL(u), err)
	}
	if len(body.Data) == 0 || len(body.Data[0].Spans) == 0 {
		return jaegerTrace{}, errNoTrace
	}
	return body.Data[0], nil
}

// traceWaterfall is the waterfall of traceID, or nil when the console has no query API
// or the id is not a trace id. A trace it cannot read gives a waterfall with Error set.
func (s *console) traceWaterfall(ctx context.Context, traceID string) *waterfall {
	if s.jaeger == nil || !validTraceID(traceID) {
		return nil
	}
	t, err := s.jaeger.fetch(ctx, traceID)
	if err != nil {
		return &waterfall{TraceID: traceID, Error: err.Error()}
	}
	w := buildWaterfall(t)
	w.TraceID = traceID
	if s.jaeger.ui != "" {
		w.UIURL = safeURL(s.jaeger.ui + "/trace/" + url.PathEscape(traceID))
	}
	return &w
}

// buildWaterfall lays t out. A span's parent is the first span it references that is in
// the trace; spans without one are roots.
func buildWaterfall(t jaegerTrace) waterfall {
	spans := t.Spans
	idx := make(map[string]int, len(spans))
	for i, sp := range spans {
		if _, dup := idx[sp.SpanID]; !dup && sp.SpanID != "" {
			idx[sp.SpanID] = i
		}
	}
	children := make(map[int][]int, len(spans))
	var roots []int
	for i, sp := range spans {
		parent := -1
		for _, r := range sp.References {
			if p, ok := idx[r.SpanID]; ok && p != i {
				parent = p
				break
			}
		}
		if parent < 0 {
			roots = append(roots, i)
		} else {
			children[parent] = append(children[parent], i)
		}
	}
	byStart := func(a, b int) int { return cmp.Compare(spans[a].StartTime, spans[b].StartTime) }
	slices.SortStableFunc(roots, byStart)
	// Depth-first, children in start order, up to consoleTraceSpans rows; a span in a
	// reference cycle (reached from no root) is drawn once, as a root.
	type entry struct{ i, depth int }
	var order []entry
	seen := make([]bool, len(spans))
	var walk func(i, depth int)
	walk = func(i, depth int) {
		if seen[i] || len(order) == consoleTraceSpans {
			return
		}
		seen[i] = true
		order = append(order, entry{i, depth})
		kids := children[i]
		slices.SortStableFunc(kids, byStart)
		for _, k := range kids {
			walk(k, min(depth+1, consoleTraceMaxDepth))
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	for i := range spans {
		walk(i, 0)
	}

	w := waterfall{Total: len(spans), Drawn: len(order)}
	start, end := int64(0), int64(0)
	for n, e := range order {
		sp := spans[e.i]
		if n == 0 || sp.StartTime < start {
			start = sp.StartTime
		}
		end = max(end, sp.StartTime+max(sp.Duration, 0))
	}
	total := max(end-start, 1)
	w.Duration = fmtDuration(time.Duration(total) * time.Microsecond)
	for n, e := range order {
		sp := spans[e.i]
		svc := orDash(t.Processes[sp.ProcessID].ServiceName)
		si := slices.Index(w.Services, svc)
		if si < 0 {
			si = len(w.Services)
			w.Services = append(w.Services, svc)
		}
		off, dur := sp.StartTime-start, max(sp.Duration, 0)
		r := wfRow{Service: svc, Operation: sp.OperationName,
			Label:  truncate(svc+"  "+sp.OperationName, consoleTraceLabel-e.depth),
			Offset: "+" + fmtDuration(time.Duration(off)*time.Microsecond), Dur: fmtDuration(time.Duration(dur) * time.Microsecond),
			Y: wfTop + n*wfRowH, LabelX: 8 + e.depth*wfIndent,
			BarX: wfLabelW + int(off*wfBarsW/total), BarY: wfTop + n*wfRowH + 3, BarW: max(int(dur*wfBarsW/total), 2),
			Class: fmt.Sprintf("svc%d", si%6)}
		r.BarW = min(r.BarW, wfLabelW+wfBarsW-r.BarX)
		r.TextX = r.BarX + r.BarW + 4
		if spanFailed(sp.Tags) {
			r.Class += " err"
		}
		w.Rows = append(w.Rows, r)
	}
	w.Width = wfLabelW + wfBarsW + 130
	w.Height = wfTop + len(w.Rows)*wfRowH + 6
	return w
}

// spanFailed tells whether a span's tags mark an error (error=true, or OpenTelemetry's
// status code ERROR).
func spanFailed(tags []jaegerTag) bool {
	for _, t := range tags {
		switch {
		case t.Key == "error" && (t.Value == true || t.Value == "true"):
			return true
		case t.Key == "otel.status_code" && t.Value == "ERROR":
			return true
		}
	}
	return false
}
