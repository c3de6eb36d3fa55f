package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/choreo-saga/choreo/tracker"
)

// contractsPage is the console's view of the contracts as they are used: the observed
// payloads that break a declared schema (the tracker's check, sagactl track run
// -contracts), as sagactl contracts observed prints them, and per event type and
// schema version its producers, readers and whether it can be retired, as sagactl
// contracts usage prints it (over Window, the ?window= parameter, default 24h).
type contractsPage struct {
	Rows     []tracker.ViolationCount
	Window   string
	Versions []usageRow
}

// handleContracts lists the contract violations the tracker keeps, most frequent first.
func (s *console) handleContracts(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.requestCtx(r)
	defer cancel()
	p := page{Title: "Contracts", Nav: "contracts"}
	vs, err := s.tr.ObservedViolations(ctx)
	if err != nil {
		p.Error = "saga tracker: " + err.Error()
		s.render(w, r, "contracts", http.StatusBadGateway, p)
		return
	}
	window := 24 * time.Hour
	if q := r.URL.Query().Get("window"); q != "" {
		if window, err = time.ParseDuration(q); err != nil || window <= 0 {
			p.Error = fmt.Sprintf("window %q: want a positive duration, e.g. 24h", q)
			s.render(w, r, "contracts", http.StatusBadRequest, p)
			return
		}
	}
	declared, err := readDeclared(contractsReference)
	if err == nil {
		var rep usageReport
		if rep, err = buildUsage(ctx, s.tr, window, declared, time.Now()); err == nil {
			p.Contracts = &contractsPage{Rows: vs, Window: rep.Window, Versions: rep.Versions}
		}
	}
	if err != nil {
		p.Error = "saga tracker: " + err.Error()
		s.render(w, r, "contracts", http.StatusBadGateway, p)
		return
	}
	s.render(w, r, "contracts", http.StatusOK, p)
}

// violatedEdges counts the kept contract violations per producer and event type
// (violationKey), for the marks on the flow page.
func (s *console) violatedEdges(ctx context.Context) (map[string]int64, error) {
	vs, err := s.tr.ObservedViolations(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(vs))
	for _, v := range vs {
		out[violationKey(v.Source, v.Type)] += v.Count
	}
	return out, nil
}

// violationKey keys violatedEdges.
func violationKey(source, typ string) string { return source + "|" + typ }

// versionString formats a schema version for the pages (0: undeclared).
func versionString(v int) string {
	if v == 0 {
		return "-"
	}
	return "v" + strconv.Itoa(v)
}
