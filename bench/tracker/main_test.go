package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/internal/testenv"
)

// A small run indexes every event, with and without the contract check (which finds no
// violation in the reference payloads), then on top of a prefilled index after timing the
// console's queries on it, and merges its figures into the results file, keeping the keys
// that were there and their order.
func TestRun(t *testing.T) {
	file := filepath.Join(t.TempDir(), "results.json")
	if err := os.WriteFile(file, []byte(`{"date": "d", "saga": {"peak_confirmed_per_sec": 50}, "tracker": {"old": 1}, "z": [1, 2]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := config{pg: testenv.PostgresDSN(t), orders: 50, partitions: 2, sagaResults: file,
		trackerCfg: "../../deploy/tracker/order.json", jsonOut: file, prefill: 20_000, queryRuns: 3}
	if err := run(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Date    string `json:"date"`
		Tracker result `json:"tracker"`
		Z       []int  `json:"z"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	tr := got.Tracker
	if got.Date != "d" || len(got.Z) != 2 || tr.Events != 200 || tr.IngestEventsPerSec <= 0 ||
		tr.SagaEventsPerSec != 200 || tr.Ratio <= 0 || tr.BytesPerEvent <= 0 || tr.FlowBytesPerEvent <= 0 ||
		tr.UncheckedPerSec <= 0 || tr.CheckedRatio <= 0 || tr.Violations != 0 { // the reference payloads keep their contracts
		t.Errorf("results after the run:\n%s", b)
	}
	if p := tr.Prefilled; p == nil || p.Events < 19_800 || p.Sagas < 4_900 || p.Stuck <= 0 || p.InFlight <= 0 || len(p.Queries) != len(consoleQueries(nil)) || p.IngestPerSec <= 0 || p.EmptyPerSec <= 0 ||
		p.OverEmpty <= 0 || p.PrefilledOverSaga <= 0 || p.StartupSeconds <= 0 {
		t.Errorf("prefilled figures after the run:\n%s", b)
	} else {
		for _, q := range p.Queries {
			if q.Runs != 3 || q.Rows <= 0 || q.P99ms <= 0 || q.LimitMs != 50 {
				t.Errorf("query figures %+v", q)
			}
		}
	}
	if strings.Contains(string(b), `"old"`) || strings.Index(string(b), `"tracker"`) > strings.Index(string(b), `"z"`) {
		t.Errorf("the tracker's figures did not replace the old ones in place:\n%s", b)
	}
}
