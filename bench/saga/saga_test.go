package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/chaos"
)

// TestHarness runs the whole harness for a couple of seconds at one low rate against
// the real processes: every placed order settles (learnt from orders.events), and the
// JSON and SVG it writes are well-formed. No timing is asserted.
func TestHarness(t *testing.T) {
	dir := t.TempDir()
	// One warm connection per service: other packages' tests share the server.
	cfg, err := parseFlags([]string{"-rates", "10", "-duration", "2s", "-drain", "90s", "-warmup", "1s", "-min-conns", "1",
		"-json", filepath.Join(dir, "results.json"), "-svg", filepath.Join(dir, "plot.svg")})
	if err != nil {
		t.Fatal(err)
	}
	cfg.log = io.Discard
	if testing.Verbose() {
		cfg.log = os.Stderr
	}
	// The build first, unbounded: on a loaded machine it alone can take minutes.
	if cfg.bins, err = chaos.Build(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rates) != 1 {
		t.Fatalf("%d rates measured, want 1", len(res.Rates))
	}
	r := res.Rates[0]
	if r.Sent != 20 || r.PostErrors != 0 {
		t.Errorf("sent %d with %d POST errors (%s), want 20 and none", r.Sent, r.PostErrors, r.FirstError)
	}
	if r.Unsettled != 0 || r.Confirmed+r.Rejected+r.Cancelled != r.Sent {
		t.Errorf("after the drain: %d confirmed, %d rejected, %d cancelled, %d unsettled of %d sent; want every order settled",
			r.Confirmed, r.Rejected, r.Cancelled, r.Unsettled, r.Sent)
	}
	if r.Confirmed == 0 {
		t.Errorf("no order confirmed")
	}
	// Every order writes WAL; on the shared server the counters are marked as such.
	if r.WAL == nil || r.WAL.RecordsPerOrder <= 0 || r.WAL.Private {
		t.Errorf("WAL account %+v; want records per order > 0, not a private cluster", r.WAL)
	}
	for _, svc := range serviceNames {
		if res.IdleRSSMiB[svc] <= 0 || r.Services[svc].MaxRSSMiB <= 0 {
			t.Errorf("%s: idle RSS %v MiB, max RSS %v MiB; want both measured", svc, res.IdleRSSMiB[svc], r.Services[svc].MaxRSSMiB)
		}
	}

	// After the rates, half the peak is offered: the tail there.
	if h := res.Half; h == nil || h.Offered < 1 || h.Unsettled != 0 || h.LatencyN == 0 || h.P99OverP50 < 1 {
		t.Errorf("half saturation: %+v; want a rate offered, every order settled, p99/p50 >= 1", h)
	}

	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Saga results `json:"saga"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	back := file.Saga
	if back.Commit == "" || len(back.Rates) != 1 || back.Rates[0].Sent != r.Sent {
		t.Errorf("results.json: commit %q, %d rates; want the run's figures", back.Commit, len(back.Rates))
	}

	svg, err := os.ReadFile(filepath.Join(dir, "plot.svg"))
	if err != nil {
		t.Fatal(err)
	}
	checkSVG(t, svg)
}

// checkSVG fails t unless b is well-formed XML with an <svg> root holding polylines.
func checkSVG(t *testing.T, b []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	root, lines := "", 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("plot: not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "polyline" {
				lines++
			}
		}
	}
	if root != "svg" || lines != 5 {
		t.Errorf("plot: root <%s> with %d polylines, want <svg> with 5 (y=x, confirmed/s, p50, p95, p99)", root, lines)
	}
}

// TestPlotEmptyAndSummary: the plot of a run without rates is still well-formed, and
// the saturation verdict follows the figures.
func TestPlotEmptyAndSummary(t *testing.T) {
	checkSVG(t, plotSVG(&results{}))
	r := &results{Rates: []rateResult{{Offered: 100, ConfirmedPerSec: 99}, {Offered: 200, ConfirmedPerSec: 150},
		{Offered: 400, ConfirmedPerSec: 140}, {Offered: 800, ConfirmedPerSec: 120}}}
	r.summarize()
	if r.PeakConfirmedPerSec != 150 || r.PeakAtOffered != 200 || r.AboveSaturationMinRatio != 0.8 || r.NoCollapse {
		t.Errorf("summary %+v: want peak 150 at 200, min ratio 0.8, a collapse", r)
	}
	checkSVG(t, plotSVG(r))
}
