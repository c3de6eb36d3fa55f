// Command jaegercheck reads traces back from Jaeger's query API (GET /api/traces/{id} and
// /api/traces?service=...) and checks which services they span. make demo TRACES=1 uses it
// to report the stuck order's trace, and make jaeger-check to assert that the stuck
// order's trace spans the services it reached and that a completed saga's trace spans
// all three services.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
)

// trace is the part of a Jaeger API trace this command reads.
type trace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		ProcessID string `json:"processID"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// services returns the sorted names of the services with spans in t.
func (t trace) services() []string {
	var out []string
	for _, s := range t.Spans {
		if p, ok := t.Processes[s.ProcessID]; ok && !slices.Contains(out, p.ServiceName) {
			out = append(out, p.ServiceName)
		}
	}
	slices.Sort(out)
	return out
}

func main() {
	api := flag.String("api", "http://127.0.0.1:16686", "Jaeger query `URL`")
	traceID := flag.String("trace", "", "trace `id` to read")
	want := flag.String("want", "", "comma-separated `services` the trace must span (with -trace)")
	complete := flag.String("complete", "", "comma-separated `services` that at least one recent trace of the first must span")
	wait := flag.Duration("wait", 20*time.Second, "how long to wait for the spans to arrive")
	flag.Parse()
	if err := run(*api, *traceID, *want, *complete, *wait); err != nil {
		fmt.Fprintln(os.Stderr, "jaegercheck:", err)
		os.Exit(1)
	}
}

func get(ctx context.Context, u string) ([]trace, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var body struct {
		Data []trace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	return body.Data, nil
}

func covers(have []string, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func run(api, traceID, want, complete string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	api = strings.TrimRight(api, "/")
	// Spans arrive batched: poll until the expected services are there or time is up.
	poll := func(u string, pick func([]trace) (trace, bool)) (trace, error) {
		var last trace
		for {
			ts, err := get(ctx, u)
			if err != nil && ctx.Err() == nil {
				return last, err
			}
			if t, ok := pick(ts); ok {
				return t, nil
			} else if len(ts) > 0 {
				last = ts[0]
			}
			select {
			case <-ctx.Done():
				return last, nil
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	failed := false
	if traceID != "" {
		w := split(want)
		t, err := poll(api+"/api/traces/"+url.PathEscape(traceID), func(ts []trace) (trace, bool) {
			return firstOr(ts), len(ts) > 0 && covers(ts[0].services(), w)
		})
		if err != nil {
			return err
		}
		fmt.Printf("trace %s: %d spans from %s (%s/api/traces/%s)\n", traceID, len(t.Spans), orNone(t.services()), api, traceID)
		if !covers(t.services(), w) {
			fmt.Printf("  want spans from %s\n", strings.Join(w, ", "))
			failed = true
		}
	}
	if c := split(complete); len(c) > 0 {
		q := url.Values{"service": {c[0]}, "limit": {"50"}, "lookback": {"1h"}}
		t, err := poll(api+"/api/traces?"+q.Encode(), func(ts []trace) (trace, bool) {
			for _, t := range ts {
				if covers(t.services(), c) {
					return t, true
				}
			}
			return trace{}, false
		})
		if err != nil {
			return err
		}
		if covers(t.services(), c) {
			fmt.Printf("a completed saga: trace %s, %d spans from %s\n", t.TraceID, len(t.Spans), strings.Join(t.services(), ", "))
		} else {
			fmt.Printf("no recent trace of %s spans %s\n", c[0], strings.Join(c, ", "))
			failed = true
		}
	}
	if failed {
		return fmt.Errorf("traces do not span the expected services")
	}
	return nil
}

func firstOr(ts []trace) trace {
	if len(ts) == 0 {
		return trace{}
	}
	return ts[0]
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "no service"
	}
	return strings.Join(s, ", ")
}
