package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/chaos"
)

// profileSeconds is the length of each CPU profile or execution trace.
const profileSeconds = 10

// takeProfiles waits a few seconds into the rate, then fetches a CPU profile (with
// trace, an execution trace) of every service instance at once from its admin listener
// (/debug/pprof/, served with PPROF=1) into dir. It returns the files written, by
// instance.
func takeProfiles(ctx context.Context, sys *chaos.System, dir string, trace bool, rate int, log io.Writer) map[string]string {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(log, "saga: profiles: %v\n", err)
		return nil
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(3 * time.Second):
	}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = map[string]string{}
	)
	client := &http.Client{Timeout: (profileSeconds + 20) * time.Second}
	for _, in := range sys.Instances() {
		wg.Go(func() {
			path, err := fetchProfile(ctx, client, in, dir, trace, rate)
			if err != nil {
				fmt.Fprintf(log, "saga: profile of %s: %v\n", in.Name, err)
				return
			}
			mu.Lock()
			out[in.Name] = path
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

func fetchProfile(ctx context.Context, client *http.Client, in chaos.Instance, dir string, trace bool, rate int) (string, error) {
	addr, err := benchutil.AdminAddr(in.LogPath)
	if err != nil {
		return "", err
	}
	endpoint := "profile"
	if trace {
		endpoint = "trace"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", addr, endpoint, profileSeconds), nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /debug/pprof/%s: %s (is PPROF=1 set?)", endpoint, resp.Status)
	}
	path := profileName(dir, in.Name, rate, trace)
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}
