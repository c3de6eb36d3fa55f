package main

import (
	"strings"
	"time"
)

// timeline is an order's history laid out as an SVG swimlane: one lane per service, one
// column per step. Each step is a dot in the lane of the service whose event caused it
// and, when it changed the order's state, an arrow to the new state in the order lane.
// Columns are evenly spaced (a saga's steps take milliseconds, its stuck wait hours); the
// time between steps is written between the columns.
type timeline struct {
	Width, Height int
	Lanes         []tlLane
	Steps         []tlStep
	AxisY         int
}

type tlLane struct {
	Name       string
	Y          int // centre line
	Top, Bottm int
}

type tlStep struct {
	X         int
	CauseY    int
	OrderY    int
	Arrow     bool // cause in another lane than order
	Event     string
	State     string // the state entered; "" for an ignored event
	Note      string
	Delta     string // time since the previous step
	DeltaX    int
	At        string
	Lane      string
	Ignored   bool
	LabelY    int
	StateY    int
	StateBoxX int
}

// Layout of the swimlane, in SVG user units.
const (
	tlLeft     = 120 // lane names
	tlColumn   = 170 // one step
	tlLaneH    = 70
	tlTop      = 30 // the axis with the durations
	tlStateBox = 150
)

// laneOf maps an event type to the service lane that emitted it.
func laneOf(eventType string) string {
	switch {
	case strings.HasPrefix(eventType, "payment."):
		return "payment"
	case strings.HasPrefix(eventType, "stock."), strings.HasPrefix(eventType, "inventory."):
		return "inventory"
	}
	return "order" // order.*, command.* (HTTP), deadline and sweeper causes
}

func buildTimeline(h []Transition) timeline {
	lanes := []string{"order", "payment", "inventory"}
	tl := timeline{AxisY: tlTop - 12}
	laneY := make(map[string]int)
	for i, name := range lanes {
		top := tlTop + i*tlLaneH
		l := tlLane{Name: name, Top: top, Bottm: top + tlLaneH, Y: top + tlLaneH/2}
		laneY[name] = l.Y
		tl.Lanes = append(tl.Lanes, l)
	}
	var prev time.Time
	for i, t := range h {
		x := tlLeft + tlColumn/2 + i*tlColumn
		lane := laneOf(t.CauseEventType)
		st := tlStep{
			X: x, CauseY: laneY[lane], OrderY: laneY["order"], Event: t.CauseEventType, Lane: lane,
			Ignored: t.Ignored, Note: t.Note, At: t.At.UTC().Format("15:04:05.000"),
			StateBoxX: x - tlStateBox/2,
		}
		if !t.Ignored {
			st.State = t.To
		}
		st.Arrow = lane != "order" && st.State != ""
		st.LabelY = st.CauseY + 22
		st.StateY = st.OrderY - 26
		if i > 0 && !prev.IsZero() && !t.At.IsZero() {
			st.Delta = "+" + fmtDuration(t.At.Sub(prev))
			st.DeltaX = x - tlColumn/2
		}
		prev = t.At
		tl.Steps = append(tl.Steps, st)
	}
	tl.Width = tlLeft + max(len(h), 1)*tlColumn + 20
	tl.Height = tlTop + len(lanes)*tlLaneH + 10
	return tl
}
