package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// echo starts a server that writes back every line it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func start(t *testing.T) *Proxy {
	t.Helper()
	p, err := Start("127.0.0.1:0", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(c net.Conn, r *bufio.Reader, line string) (string, error) {
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func TestForwards(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	if got, err := roundTrip(c, r, "hello"); err != nil || got != "hello" {
		t.Fatalf("round trip = %q, %v", got, err)
	}
	if p.Conns() != 1 {
		t.Fatalf("Conns = %d, want 1", p.Conns())
	}
}

func TestLatencyDelaysEachDirection(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	p.Set(Faults{Latency: 50 * time.Millisecond})
	begin := time.Now()
	if got, err := roundTrip(c, r, "slow"); err != nil || got != "slow" {
		t.Fatalf("round trip = %q, %v", got, err)
	}
	// A lower bound only: the chunk waits out the latency once each way.
	if took := time.Since(begin); took < 100*time.Millisecond {
		t.Fatalf("round trip took %v, want at least twice the 50ms latency", took)
	}
}

func TestBandwidthCap(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	p.Set(Faults{BytesPerSecond: 1000})
	line := string(make([]byte, 199)) // 200 bytes with the newline, each way
	begin := time.Now()
	if _, err := roundTrip(c, r, line); err != nil {
		t.Fatal(err)
	}
	// A lower bound only: 200 bytes at 1000 B/s take 200ms one way (the two directions
	// overlap).
	if took := time.Since(begin); took < 200*time.Millisecond {
		t.Fatalf("200 bytes each way at 1000 B/s took %v, want at least 200ms", took)
	}
}

func TestDownResetsOpenAndNewConnections(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "before"); err != nil {
		t.Fatal(err)
	}
	p.Set(Faults{Down: true})
	if _, err := roundTrip(c, r, "during"); err == nil {
		t.Fatal("an open connection still forwarded while down")
	}
	// A new connection is accepted by the kernel, then reset: the dial or the first
	// round trip fails.
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		if _, err := roundTrip(c2, bufio.NewReader(c2), "new"); err == nil {
			t.Fatal("a new connection forwarded while down")
		}
		c2.Close()
	}
	p.Clear()
	c3, r3 := dial(t, p)
	if got, err := roundTrip(c3, r3, "after"); err != nil || got != "after" {
		t.Fatalf("after the partition: %q, %v", got, err)
	}
}

func TestHangHoldsThenCloses(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "before"); err != nil {
		t.Fatal(err)
	}
	p.Set(Faults{Hung: true})
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, err := roundTrip(c, r, "held")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read on a hung connection = %v, want a timeout", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	p.Clear() // the hung connection is closed, not resumed
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("a hung connection went on after the hang")
	}
	c2, r2 := dial(t, p)
	if got, err := roundTrip(c2, r2, "after"); err != nil || got != "after" {
		t.Fatalf("after the hang: %q, %v", got, err)
	}
}

func TestResetOnce(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "before"); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	_, err := roundTrip(c, r, "after")
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("after Reset: %v, want a reset connection", err)
	}
	c2, r2 := dial(t, p)
	if got, err := roundTrip(c2, r2, "new"); err != nil || got != "new" {
		t.Fatalf("a new connection after Reset: %q, %v", got, err)
	}
}
