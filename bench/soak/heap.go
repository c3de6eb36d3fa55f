package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/chaos"
)

// heapPoint is one service instance's heap at one point of the run, after a forced GC.
type heapPoint struct {
	Point    string  `json:"point"` // warmup or end
	T        float64 `json:"t_seconds"`
	Instance string  `json:"instance"`
	memStats
	Profile string `json:"profile"` // the heap profile's file
}

// memStats is what a process's Go runtime holds (runtime.MemStats), read from the text
// heap profile: where an RSS that grows while the live heap does not goes.
type memStats struct {
	HeapInuse    uint64 `json:"heap_inuse_bytes"`
	HeapAlloc    uint64 `json:"heap_alloc_bytes"` // live objects after the GC
	HeapSys      uint64 `json:"heap_sys_bytes"`
	HeapReleased uint64 `json:"heap_released_bytes"` // returned to the OS: HeapSys − HeapReleased is heap the process keeps
	StackInuse   uint64 `json:"stack_inuse_bytes"`
	Sys          uint64 `json:"sys_bytes"` // every byte the runtime obtained from the OS
}

// saveHeaps fetches from each instance's admin listener (PPROF=1) its heap profile after
// a GC (/debug/pprof/heap?gc=1) into dir as <instance>.<point>.pb.gz, and then its
// MemStats (/debug/pprof/heap?debug=1), so that go tool pprof -base of two points shows
// what grew between them.
func saveHeaps(ctx context.Context, instances []chaos.Instance, dir, point string, t float64) ([]heapPoint, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("soak: profiles: %w", err)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	var out []heapPoint
	for _, in := range instances {
		addr, err := benchutil.AdminAddr(in.LogPath)
		if err != nil {
			return out, fmt.Errorf("soak: heap of %s: %w", in.Name, err)
		}
		hp := heapPoint{Point: point, T: t, Instance: in.Name, Profile: filepath.Join(dir, in.Name+"."+point+".pb.gz")}
		if err := getTo(ctx, client, "http://"+addr+"/debug/pprof/heap?gc=1", func(r io.Reader) error {
			f, err := os.Create(hp.Profile)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, r); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}); err != nil {
			return out, fmt.Errorf("soak: heap of %s: %w", in.Name, err)
		}
		if err := getTo(ctx, client, "http://"+addr+"/debug/pprof/heap?debug=1", func(r io.Reader) error {
			var err error
			hp.memStats, err = readMemStats(r)
			return err
		}); err != nil {
			return out, fmt.Errorf("soak: heap of %s: %w", in.Name, err)
		}
		out = append(out, hp)
	}
	return out, nil
}

func getTo(ctx context.Context, client *http.Client, url string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s (is PPROF=1 set?)", url, resp.Status)
	}
	return read(resp.Body)
}

// readMemStats reads the "# Name = value" lines that end the text heap profile
// (/debug/pprof/heap?debug=1); the Stack line is "in use / obtained".
func readMemStats(r io.Reader) (memStats, error) {
	var m memStats
	fields := map[string]*uint64{"HeapInuse": &m.HeapInuse, "HeapAlloc": &m.HeapAlloc, "HeapSys": &m.HeapSys,
		"HeapReleased": &m.HeapReleased, "Stack": &m.StackInuse, "Sys": &m.Sys}
	seen := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "# "), " = ")
		field, known := fields[name]
		if !ok || !known {
			continue
		}
		value, _, _ = strings.Cut(value, " ")
		n, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			return m, fmt.Errorf("%s: %w", name, err)
		}
		*field = n
		seen++
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if seen < len(fields) {
		return m, fmt.Errorf("the heap profile names %d of the %d runtime.MemStats fields read", seen, len(fields))
	}
	return m, nil
}

// printHeap prints each instance's heap at every point, and the pprof command that
// compares the first point's profile with the last's.
func printHeap(w io.Writer, hs []heapPoint) {
	if len(hs) == 0 {
		return
	}
	byInstance := map[string][]heapPoint{}
	for _, h := range hs {
		byInstance[h.Instance] = append(byInstance[h.Instance], h)
	}
	fmt.Fprintln(w, "Go memory after a forced GC, MiB, per point: live heap (HeapAlloc) / heap in use / heap kept (HeapSys − HeapReleased) / stacks / all the runtime holds (Sys):")
	mib := func(b uint64) float64 { return float64(b) / (1 << 20) }
	for _, name := range sortedKeys(byInstance) {
		ps := byInstance[name]
		fmt.Fprintf(w, "  %-12s", name)
		for _, p := range ps {
			fmt.Fprintf(w, " %s (%.0f s) %.1f / %.1f / %.1f / %.1f / %.1f", p.Point, p.T, mib(p.HeapAlloc), mib(p.HeapInuse),
				mib(p.HeapSys-p.HeapReleased), mib(p.StackInuse), mib(p.Sys))
		}
		fmt.Fprintln(w)
		if len(ps) > 1 {
			fmt.Fprintf(w, "    go tool pprof -base %s %s\n", ps[0].Profile, ps[len(ps)-1].Profile)
		}
	}
}
