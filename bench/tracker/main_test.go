package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/internal/testenv"
)

// A small run indexes every event, with and without the contract check (which finds no
// violation in the reference payloads), then on top of a prefilled index after timing the
// console's queries on it, and merges its figures into the results file, keeping the keys
// that were there and their order: on -pg's server with an empty -shared-buffers, on a
// private cluster with that shared_buffers otherwise, which it drops at the end.
func TestRun(t *testing.T) {
	for _, tc := range []struct{ sharedBuffers, server string }{{"", serverShared}, {"256MB", serverPrivate}} {
		t.Run(tc.server, func(t *testing.T) {
			before := clusters(t)
			testRun(t, tc.sharedBuffers, tc.server)
			if after := clusters(t); after != before {
				t.Errorf("pg_lsclusters before the run:\n%s\nafter it:\n%s", before, after)
			}
		})
	}
}

func testRun(t *testing.T, sharedBuffers, server string) {
	file := filepath.Join(t.TempDir(), "results.json")
	if err := os.WriteFile(file, []byte(`{"date": "d", "saga": {"peak_confirmed_per_sec": 50}, "tracker": {"old": 1}, "z": [1, 2]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := config{pg: testenv.PostgresDSN(t), orders: 50, partitions: 2, sagaResults: file,
		trackerCfg: "../../deploy/tracker/order.json", jsonOut: file, prefill: 20_000, queryRuns: 3, sharedBuffers: sharedBuffers}
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
		tr.UncheckedPerSec <= 0 || tr.CheckedRatio <= 0 || tr.Violations != 0 || // the reference payloads keep their contracts
		tr.Server != server || tr.SharedBuffers == "" || sharedBuffers != "" && tr.SharedBuffers != sharedBuffers {
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

// clusters is what pg_lsclusters lists.
// clusters lists the clusters pg_lsclusters shows that this process made (another run on
// the machine may make and drop its own meanwhile).
func clusters(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("pg_lsclusters", "-h").Output()
	if err != nil {
		t.Fatalf("pg_lsclusters: %v", err)
	}
	var ours []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, clusterPrefix()) {
			ours = append(ours, line)
		}
	}
	return strings.Join(ours, "\n")
}

// -shared-buffers is 2GB unless given; empty, it is kept empty; other arguments are refused.
func TestParseFlags(t *testing.T) {
	c, err := parseFlags(nil)
	if err != nil || c.sharedBuffers != "2GB" || c.prefill != 0 || c.privateCluster() {
		t.Errorf("parseFlags() = %+v, %v; want -shared-buffers 2GB, no -prefill, no private cluster", c, err)
	}
	c, err = parseFlags([]string{"-prefill", "100000"})
	if err != nil || !c.privateCluster() || c.validate() != nil {
		t.Errorf("-prefill 100000: %+v, %v; want a private cluster with shared_buffers 2GB", c, err)
	}
	c, err = parseFlags([]string{"-prefill", "100000", "-shared-buffers", ""})
	if err != nil || c.sharedBuffers != "" || c.privateCluster() || c.validate() != nil {
		t.Errorf("-shared-buffers '': %+v, %v; want -pg's server", c, err)
	}
	c, err = parseFlags([]string{"-prefill", "100000", "-shared-buffers", "2gb"})
	if err != nil || c.validate() == nil {
		t.Errorf("-shared-buffers 2gb: %+v, %v; want validate to refuse it (Postgres' units are case-sensitive)", c, err)
	}
	if c, err := parseFlags([]string{"-shared-buffers", "2gb"}); err != nil || c.validate() != nil {
		t.Errorf("-shared-buffers 2gb without -prefill: %+v, %v; want it unused", c, err)
	}
	if _, err := parseFlags([]string{"-prefill", "10", "extra"}); err == nil {
		t.Error("an extra argument was accepted")
	}
}

func TestPgBytes(t *testing.T) {
	for s, want := range map[string]int64{"2GB": 2 << 30, "512MB": 512 << 20, "16384": 128 << 20, "1.5GB": 3 << 29,
		" 256 MB ": 256 << 20, "128kB": 128 << 10, "1TB": 1 << 40, "4096B": 4096} {
		if got, err := pgBytes(s); err != nil || got != want {
			t.Errorf("pgBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "2gb", "2 GiB", "-1GB", "0", "GB", "2GB 1MB"} {
		if got, err := pgBytes(s); err == nil {
			t.Errorf("pgBytes(%q) = %d, want an error", s, got)
		}
	}
}

// A buffer pool may take up to half the memory available.
func TestCheckRoom(t *testing.T) {
	avail, err := parseMemAvailable("MemTotal:       24570000 kB\nMemFree:        12000000 kB\nMemAvailable:   22000000 kB\n")
	if err != nil || avail != 22_000_000<<10 {
		t.Fatalf("parseMemAvailable = %d, %v", avail, err)
	}
	if _, err := parseMemAvailable("MemTotal: 1 kB\n"); err == nil {
		t.Error("parseMemAvailable found MemAvailable in a meminfo without it")
	}
	if err := checkRoom(2<<30, avail); err != nil {
		t.Errorf("2 GiB of %d: %v", avail, err)
	}
	if err := checkRoom(11<<30, avail); err == nil {
		t.Errorf("11 GiB of %d: accepted", avail)
	}
}
