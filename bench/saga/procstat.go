package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat (100 on Linux).
const clockTicks = 100

// cpuTime returns the user+system CPU time pid has used, from /proc/PID/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: fields after
	// the last ')' start with field 3 (state), so utime (14) and stime (15) are 11 and 12.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')' in %q", pid, s)
	}
	fs := strings.Fields(s[i+1:])
	if len(fs) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(fs))
	}
	var ticks int64
	for _, f := range fs[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// memory returns pid's resident set now (VmRSS) and its peak so far (VmHWM), in bytes.
func memory(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		fs := strings.Fields(v) // "1234 kB"
		if len(fs) == 0 {
			continue
		}
		n, err := strconv.ParseInt(fs[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status %s: %w", pid, k, err)
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			hwm = n << 10
		}
	}
	return rss, hwm, nil
}

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
	maxRSS map[string]int64 // per group: sum over its pids, max over samples
}

func newProcWatch(pids map[string][]int) *procWatch {
	w := &procWatch{pids: pids, start: map[int]time.Duration{}, maxRSS: map[string]int64{}}
	for _, ps := range pids {
		for _, p := range ps {
			w.start[p], _ = cpuTime(p)
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
			rss, _, _ := memory(p)
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
			if c, err := cpuTime(p); err == nil {
				out[g] += c - w.start[p]
			}
		}
	}
	return out
}
