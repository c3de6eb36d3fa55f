package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/choreo-saga/choreo/tracker"
)

// trackFlow prints the tracker's observed flow and writes its SVG and AsyncAPI document
// where asked. The AsyncAPI document holds what the index observed: the services'
// handler registrations are not reachable from here (tracker.Registrations adds them in Go).
func trackFlow(ctx context.Context, tr *tracker.Tracker, f trackFlags, std stdio) error {
	flow, err := tr.FlowRecent(ctx, f.last)
	if err != nil {
		return err
	}
	if f.svg != "" {
		if err := os.WriteFile(f.svg, flow.SVG(), 0o644); err != nil {
			return fmt.Errorf("sagactl: flow: %w", err)
		}
	}
	if f.asyncapi != "" {
		doc, err := flow.AsyncAPI("sagas observed by the choreo tracker", "observed")
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.asyncapi, doc, 0o644); err != nil {
			return fmt.Errorf("sagactl: flow: %w", err)
		}
	}
	if f.c.json {
		return printJSON(flow, std)
	}
	return printFlow(flow, std)
}

// printFlow writes the flow as a table of arrows, then the types that start sagas.
func printFlow(flow tracker.Flow, std stdio) error {
	if len(flow.Nodes) == 0 {
		_, err := fmt.Fprintln(std.out, "no events indexed")
		return err
	}
	t := newTable("FROM", "", "TO", "BY", "COUNT", "CAUSED", "P50", "P99").right(4, 5, 6, 7)
	for _, e := range flow.Edges {
		t.add(e.From, "→", e.To, e.Source, strconv.Itoa(e.Count), strconv.Itoa(e.ByCausation),
			fmtLatency(e.P50, e.Count), fmtLatency(e.P99, e.Count))
	}
	if err := t.render(std.out); err != nil {
		return err
	}
	var starts []string
	for _, n := range flow.Nodes {
		if n.Starts > 0 {
			starts = append(starts, fmt.Sprintf("%s (%d, by %s)", n.Type, n.Starts, strings.Join(n.Sources, ", ")))
		}
	}
	_, err := fmt.Fprintf(std.out, "\nstarts: %s\n", orDash(strings.Join(starts, ", ")))
	return err
}
