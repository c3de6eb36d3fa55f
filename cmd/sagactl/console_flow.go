package main

import (
	"html/template"
	"net/http"
	"time"

	"github.com/choreo-saga/choreo/tracker"
)

// consoleFlowWindow is the flow page's window: it draws the events of the last hour.
const consoleFlowWindow = time.Hour

// flowPage is the observed choreography as the tracker's index shows it.
type flowPage struct {
	Flow   tracker.Flow
	Window string // the window of event time it is computed from, in words
	// SVG is Flow.SVG(), which escapes every label it draws, inline in the page.
	SVG template.HTML
	// Violated counts the contract violations kept per producer and type (violationKey),
	// marked on the edges into that type.
	Violated map[string]int64
}

// handleFlow shows the observed flow: its SVG and its edges as a table.
func (s *console) handleFlow(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.requestCtx(r)
	defer cancel()
	p := page{Title: "Flow", Nav: "flow"}
	flow, err := s.tr.FlowRecent(ctx, consoleFlowWindow)
	if err != nil {
		p.Error = "saga tracker: " + err.Error()
		s.render(w, r, "flow", http.StatusBadGateway, p)
		return
	}
	violated, err := s.violatedEdges(ctx)
	if err != nil {
		p.Error = "saga tracker: " + err.Error()
		s.render(w, r, "flow", http.StatusBadGateway, p)
		return
	}
	p.Flow = &flowPage{Flow: flow, Window: "hour", SVG: template.HTML(flow.SVG()), Violated: violated} //nolint:gosec // Flow.SVG escapes every label
	s.render(w, r, "flow", http.StatusOK, p)
}

// handleFlowFile serves the observed flow as an SVG file or as its AsyncAPI 3.0.0 document.
func (s *console) handleFlowFile(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.requestCtx(r)
	defer cancel()
	flow, err := s.tr.FlowRecent(ctx, consoleFlowWindow)
	if err != nil {
		http.Error(w, "saga tracker: "+err.Error(), http.StatusBadGateway)
		return
	}
	var body []byte
	ctype := "application/json"
	switch r.PathValue("file") {
	case "flow.svg":
		body, ctype = flow.SVG(), "image/svg+xml"
	case "asyncapi.json":
		if body, err = flow.AsyncAPI("sagas observed by the choreo tracker", "observed"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	default:
		http.NotFound(w, r)
		return
	}
	if ctype == "image/svg+xml" {
		body = visibleMarkup(body)
	}
	w.Header().Set("Content-Type", ctype)
	_, _ = w.Write(body)
}
