package app_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/app"
)

// attack holds perAddr connections from each of the loopback addresses addrs to host,
// half of them never sending a byte and half stopping in their request line
// (slowloris), and opens a new one each time one is closed, until stop is called. wait
// returns once every connection has been opened at least once.
type attack struct {
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	stopped bool
	opened  sync.WaitGroup
	done    sync.WaitGroup
}

func startAttack(t *testing.T, host string, addrs []string, perAddr int) *attack {
	t.Helper()
	a := &attack{conns: map[net.Conn]struct{}{}}
	for _, src := range addrs {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
		for i := range perAddr {
			a.opened.Add(1)
			a.done.Add(1)
			go a.hold(d, host, i%2 == 1)
		}
	}
	t.Cleanup(a.stop)
	return a
}

// hold keeps one connection open: it dials, sends nothing or half a request line, reads
// until the server closes the connection, and dials again.
func (a *attack) hold(d *net.Dialer, host string, slowloris bool) {
	defer a.done.Done()
	first := true
	for {
		c, err := d.Dial("tcp", host)
		a.mu.Lock()
		if a.stopped {
			a.mu.Unlock()
			if err == nil {
				c.Close()
			}
			if first {
				a.opened.Done()
			}
			return
		}
		if err == nil {
			a.conns[c] = struct{}{}
		}
		a.mu.Unlock()
		if first {
			a.opened.Done()
			first = false
		}
		if err != nil {
			continue // the backlog was full: try again
		}
		if slowloris {
			_, _ = io.WriteString(c, "GET /healthz HT")
		}
		_, _ = io.Copy(io.Discard, c) // until the server closes it (or stop does)
		a.mu.Lock()
		delete(a.conns, c)
		a.mu.Unlock()
		c.Close()
	}
}

func (a *attack) stop() {
	a.mu.Lock()
	a.stopped = true
	for c := range a.conns {
		c.Close()
	}
	a.mu.Unlock()
	a.done.Wait()
}

// TestHTTPUnfinishedConnectionFlood: 256 connections from each of 127.0.0.2 to 127.0.0.6
// (1,280, above MaxConns) that send nothing or stop in their request line, reopened as
// soon as they are closed, do not keep a client at 127.0.0.1 from being answered:
// its connection takes the slot of the oldest unfinished connection of the client
// holding the most. The header time-out is set above the client's patience, so only
// eviction can let it in; before it, the client waited for the time-out (10 s by
// default), behind the attackers' reconnections.
func TestHTTPUnfinishedConnectionFlood(t *testing.T) {
	base, _ := runHTTPApp(t, app.HTTPLimits{ReadHeaderTimeout: 5 * time.Minute}, nil)
	host := strings.TrimPrefix(base, "http://")
	a := startAttack(t, host, []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"}, app.DefaultMaxConnsPerClient)
	a.opened.Wait()

	// A generous time-out: answers take milliseconds when the client is not starved.
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 5 {
		for _, path := range []string{"/healthz", "/readyz"} {
			resp, err := hc.Get(base + path)
			if err != nil {
				t.Fatalf("request %d, GET %s under the flood: %v", i, path, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d, GET %s under the flood: %d", i, path, resp.StatusCode)
			}
		}
		resp, err := hc.Post(base+"/echo", "text/plain", strings.NewReader("hi"))
		if err != nil {
			t.Fatalf("request %d, POST /echo under the flood: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "hi" {
			t.Fatalf("request %d, POST /echo under the flood: %d %q", i, resp.StatusCode, b)
		}
	}
}
