// Command healthcheck probes an HTTP endpoint and exits 0 when it answers 2xx, 1
// otherwise. The service images are distroless (no shell, curl or wget), so
// docker-compose.yml's healthchecks run this static binary, copied into every image by
// the Dockerfile:
//
//	healthcheck [-timeout 3s] http://127.0.0.1:8080/readyz
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	timeout := flag.Duration("timeout", 3*time.Second, "request timeout")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: healthcheck [-timeout 3s] URL")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := probe(flag.Arg(0), *timeout); err != nil {
		fmt.Fprintf(os.Stderr, "healthcheck: %v\n", err)
		os.Exit(1)
	}
}

// probe GETs url and returns an error unless the answer is 2xx.
func probe(url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return nil
}
