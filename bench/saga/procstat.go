package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/choreo-saga/choreo/internal/procstat"
)

// loadAverage returns the 1, 5 and 15 minute load averages.
func loadAverage() ([3]float64, error) {
	var la [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return la, err
	}
	fs := strings.Fields(string(b))
	if len(fs) < 3 {
		return la, fmt.Errorf("/proc/loadavg: %q", b)
	}
	for i := range la {
		if la[i], err = strconv.ParseFloat(fs[i], 64); err != nil {
			return la, fmt.Errorf("/proc/loadavg: %w", err)
		}
	}
	return la, nil
}

// procWatch follows a set of processes during one rate: CPU at start and end, and the
// largest resident set seen by the periodic samples.
type procWatch struct {
	pids   map[string][]int // group (service) -> pids
	start  map[int]time.Duration
	cs0    map[int]int64    // context switches at start
	maxRSS map[string]int64 // per group: sum over its pids, max over samples
}

func newProcWatch(pids map[string][]int) *procWatch {
	w := &procWatch{pids: pids, start: map[int]time.Duration{}, cs0: map[int]int64{}, maxRSS: map[string]int64{}}
	for _, ps := range pids {
		for _, p := range ps {
			w.start[p], _ = procstat.CPU(p)
			w.cs0[p], _ = procstat.ContextSwitches(p)
		}
	}
	w.sample()
	return w
}

// sample records the current resident sets.
func (w *procWatch) sample() {
	for g, ps := range w.pids {
		var sum int64
		for _, p := range ps {
			rss, _, _ := procstat.Memory(p)
			sum += rss
		}
		w.maxRSS[g] = max(w.maxRSS[g], sum)
	}
}

// cpu returns each group's CPU time since newProcWatch.
func (w *procWatch) cpu() map[string]time.Duration {
	out := map[string]time.Duration{}
	for g, ps := range w.pids {
		for _, p := range ps {
			if c, err := procstat.CPU(p); err == nil {
				out[g] += c - w.start[p]
			}
		}
	}
	return out
}

// contextSwitches returns each group's context switches since newProcWatch.
func (w *procWatch) contextSwitches() map[string]int64 {
	out := map[string]int64{}
	for g, ps := range w.pids {
		for _, p := range ps {
			if c, err := procstat.ContextSwitches(p); err == nil {
				out[g] += c - w.cs0[p]
			}
		}
	}
	return out
}
