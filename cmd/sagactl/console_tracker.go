package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/choreo-saga/choreo/tracker"
)

// Bounds of the tracker's pages: every query the console sends the tracker has a LIMIT.
const (
	consoleStuckSagas = 50  // stuck sagas on the overview
	consoleSagaList   = 200 // sagas on the sagas page
	consoleLaneItems  = 120 // items drawn in a saga's swimlane (the tables list them all)
)

// sagaCount is one saga kind's counts on the overview and the sagas page.
type sagaCount struct {
	Saga      string `json:"saga"`
	InFlight  int64  `json:"in_flight"`
	Stuck     int64  `json:"stuck"`
	Completed int64  `json:"completed"`
	Since     string `json:"since,omitempty"` // start of the earliest counted saga
}

// sagaRow is one saga in a list.
type sagaRow struct {
	ID          string `json:"correlation_id"`
	Saga        string `json:"saga"`
	Status      string `json:"status"`
	Started     string `json:"started"`
	Ended       string `json:"ended,omitempty"`
	LastType    string `json:"last_type"`
	Events      int    `json:"events"`
	DeadLetters int    `json:"dead_letters"`
	Service     string `json:"service,omitempty"`   // stuck: who is expected to answer
	Waiting     string `json:"waiting,omitempty"`   // stuck: describeWaiting
	StuckFor    string `json:"stuck_for,omitempty"` // stuck: time since the deadline
}

func toSagaRow(s tracker.Summary, now time.Time) sagaRow {
	r := sagaRow{ID: s.CorrelationID, Saga: s.Saga, Status: string(s.Status), Started: tsString(s.Started),
		LastType: s.LastType, Events: s.Events, DeadLetters: s.DeadLetters}
	if !s.Ended.IsZero() {
		r.Ended = tsString(s.Ended)
	}
	if w := s.Waiting; w != nil {
		r.Service, r.Waiting, r.StuckFor = w.Service, describeWaiting(*w), fmtDuration(now.Sub(w.Deadline))
	}
	return r
}

func tsString(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// sagaCounts reads the tracker's counts per saga kind.
func (s *console) sagaCounts(ctx context.Context) ([]sagaCount, error) {
	cs, err := s.tr.Counts(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]sagaCount, 0, len(cs))
	for _, c := range cs {
		out = append(out, sagaCount{Saga: c.Saga, InFlight: c.InFlight, Stuck: c.Stuck, Completed: c.Completed,
			Since: tsString(c.Since)})
	}
	return out, nil
}

// findSagas reads at most limit sagas the filter selects, as rows.
func (s *console) findSagas(ctx context.Context, f tracker.Filter) ([]sagaRow, error) {
	sums, err := s.tr.Find(ctx, f)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]sagaRow, 0, len(sums))
	for _, x := range sums {
		out = append(out, toSagaRow(x, now))
	}
	return out, nil
}

// sagasPage is the sagas page: counts per kind and the sagas a filter selects.
type sagasPage struct {
	Counts []sagaCount
	Status string
	Saga   string
	Kinds  []string
	Rows   []sagaRow
	Limit  int
}

// Statuses lists the statuses the filter offers.
func (sagasPage) Statuses() []string {
	return []string{string(tracker.StatusStuck), string(tracker.StatusInFlight), string(tracker.StatusCompleted)}
}

func (s *console) handleSagas(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if id := strings.TrimSpace(q.Get("id")); id != "" { // the correlation id box without script
		http.Redirect(w, r, "/sagas/"+pathEscape(id), http.StatusSeeOther)
		return
	}
	sp := &sagasPage{Status: q.Get("status"), Saga: q.Get("saga"), Limit: consoleSagaList}
	p := page{Title: "Sagas", Nav: "sagas", Sagas: sp}
	if !slices.Contains(sp.Statuses(), sp.Status) {
		sp.Status = ""
	}
	ctx, cancel := s.requestCtx(r)
	defer cancel()
	var err error
	if sp.Counts, err = s.sagaCounts(ctx); err == nil {
		for _, c := range sp.Counts {
			sp.Kinds = append(sp.Kinds, c.Saga)
		}
		sp.Rows, err = s.findSagas(ctx, tracker.Filter{Status: tracker.Status(sp.Status), Saga: sp.Saga, Limit: consoleSagaList})
	}
	if err != nil {
		p.Error = "saga tracker: " + err.Error()
		s.render(w, r, "sagas", http.StatusBadGateway, p)
		return
	}
	s.render(w, r, "sagas", http.StatusOK, p)
}

// sagaPage is one correlation id as the tracker indexed it, with the order service's
// own view of it where the order API knows it.
type sagaPage struct {
	ID          string
	Sagas       []sagaRow
	Events      []sagaEvent
	DeadLetters []tracker.DeadLetter
	Violations  []tracker.Violation // its events' contract violations, in time order
	Lanes       sagaLanes
	Order       *Order // the order API's order of this id; nil when it has none
	OrderError  string // why the order API did not answer, when it failed
	OrderWait   string // Order.waitingOn
	CanCancel   bool
	Trace       *waterfall // the saga's trace read from Jaeger; nil without -jaeger-query
}

// sagaEvent is one event row of the saga page.
type sagaEvent struct {
	tracker.Event
	Delta    string // time since the previous event
	CausedBy string // type of the causing event when it is in this saga, else ""
}

func (s *console) handleSaga(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := s.requestCtx(r)
	defer cancel()
	p := page{Title: "Saga " + id, Nav: "sagas"}
	tl, err := s.tr.Saga(ctx, id)
	if err != nil {
		status := http.StatusBadGateway
		if errors.Is(err, tracker.ErrNotFound) {
			status = http.StatusNotFound
		}
		p.Error = "saga tracker: " + err.Error()
		s.render(w, r, "saga", status, p)
		return
	}
	sp := &sagaPage{ID: id, DeadLetters: tl.DeadLetters, Violations: tl.Violations}
	now := s.now()
	for _, x := range tl.Sagas {
		sp.Sagas = append(sp.Sagas, toSagaRow(x, now))
	}
	types := make(map[string]string, len(tl.Events))
	for i, e := range tl.Events {
		types[e.ID] = e.Type
		se := sagaEvent{Event: e, CausedBy: types[e.CausationID]}
		if i > 0 {
			se.Delta = "+" + fmtDuration(e.Time.Sub(tl.Events[i-1].Time))
		}
		sp.Events = append(sp.Events, se)
	}
	if o, err := s.api.Get(ctx, id); err == nil {
		sp.Order, sp.OrderWait, sp.CanCancel = &o, o.waitingOn(), !terminal(o.State)
	} else if !errors.Is(err, errNotFound) {
		sp.OrderError = err.Error()
	}
	sp.Lanes = buildSagaLanes(tl, sp.Order)
	sp.Trace = s.traceWaterfall(ctx, sagaTraceID(tl, sp.Order))
	p.Saga = sp
	s.render(w, r, "saga", http.StatusOK, p)
}

// sagaLanes is a correlation id's records as an SVG swimlane: one lane per producing
// service in order of appearance, a lane for dead letters, and, where the order service
// knows the id, a lane of its state transitions. Each record is a column, in time order;
// an arrow joins an event to the events and transitions it caused.
type sagaLanes struct {
	Width, Height int
	Lanes         []tlLane
	Items         []laneItem
	Drawn, Total  int
}

type laneItem struct {
	X, Y         int
	Class        string // event, dead, state
	Label        string
	At           string
	Title        string
	Arrow        bool // from FromX,FromY (the cause)
	FromX, FromY int
	Delta        string
	DeltaX       int
	BoxX         int
}

// Lane names besides the services'.
const (
	laneDead  = "dead letters"
	laneOrder = "order service (history)"
)

// Layout of the saga swimlane, in SVG user units.
const (
	slLeft   = 170
	slColumn = 150
	slLaneH  = 64
	slTop    = 30
	slBox    = 136
)

func buildSagaLanes(tl tracker.Timeline, o *Order) sagaLanes {
	type item struct {
		at                time.Time
		lane, class       string
		label, title, id  string
		cause, causeTitle string
	}
	var items []item
	for _, e := range tl.Events {
		items = append(items, item{at: e.Time, lane: orDash(e.Source), class: "event", label: e.Type, id: e.ID, cause: e.CausationID,
			title: fmt.Sprintf("%s from %s, %s %d:%d", e.Type, orDash(e.Source), e.Topic, e.Partition, e.Offset)})
	}
	for _, d := range tl.DeadLetters {
		items = append(items, item{at: d.Time, lane: laneDead, class: "dead", label: d.Type, cause: d.ID,
			title: fmt.Sprintf("%s dead-lettered (%s): %s", d.Type, orDash(d.Reason), orDash(d.Error))})
	}
	if o != nil {
		for _, h := range o.History {
			if h.Ignored {
				continue
			}
			items = append(items, item{at: h.At, lane: laneOrder, class: "state", label: "→ " + h.To, cause: h.CauseEventID,
				title: fmt.Sprintf("%s → %s on %s", orDash(h.From), h.To, orDash(h.CauseEventType))})
		}
	}
	slices.SortStableFunc(items, func(a, b item) int { return a.at.Compare(b.at) })
	sl := sagaLanes{Total: len(items)}
	if len(items) > consoleLaneItems {
		items = items[:consoleLaneItems]
	}
	sl.Drawn = len(items)
	var names []string
	for _, it := range items {
		if it.lane != laneDead && it.lane != laneOrder && !slices.Contains(names, it.lane) {
			names = append(names, it.lane)
		}
	}
	for _, extra := range []string{laneDead, laneOrder} {
		if slices.ContainsFunc(items, func(it item) bool { return it.lane == extra }) {
			names = append(names, extra)
		}
	}
	laneY := map[string]int{}
	for i, n := range names {
		top := slTop + i*slLaneH
		sl.Lanes = append(sl.Lanes, tlLane{Name: n, Top: top, Bottm: top + slLaneH, Y: top + slLaneH/2})
		laneY[n] = top + slLaneH/2
	}
	pos := map[string][2]int{} // event id → its dot
	for i, it := range items {
		li := laneItem{X: slLeft + slColumn/2 + i*slColumn, Y: laneY[it.lane], Class: it.class,
			Label: it.label, At: it.at.UTC().Format("15:04:05.000"), Title: it.title}
		li.BoxX = li.X - slBox/2
		if from, ok := pos[it.cause]; ok && it.cause != "" {
			li.Arrow, li.FromX, li.FromY = true, from[0], from[1]
		}
		if it.id != "" {
			pos[it.id] = [2]int{li.X, li.Y}
		}
		if i > 0 && !items[i-1].at.IsZero() && !it.at.IsZero() {
			li.Delta, li.DeltaX = "+"+fmtDuration(it.at.Sub(items[i-1].at)), li.X-slColumn/2
		}
		sl.Items = append(sl.Items, li)
	}
	sl.Width = slLeft + max(len(items), 1)*slColumn + 20
	sl.Height = slTop + len(names)*slLaneH + 10
	return sl
}

// sagaTraceID is the trace the saga's events carry: the first event's with a trace id,
// else the order's.
func sagaTraceID(tl tracker.Timeline, o *Order) string {
	for _, e := range tl.Events {
		if e.TraceID != "" {
			return e.TraceID
		}
	}
	if o != nil {
		return o.TraceID
	}
	return ""
}
