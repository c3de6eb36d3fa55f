package main

import (
	"context"
	"net/http"
	"strconv"

	"github.com/choreo-saga/choreo/tracker"
)

// contractsPage is the console's view of the observed payloads that break a declared
// schema (the tracker's check, sagactl track run -contracts), as sagactl contracts
// observed prints them.
type contractsPage struct {
	Rows []tracker.ViolationCount
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
	p.Contracts = &contractsPage{Rows: vs}
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
