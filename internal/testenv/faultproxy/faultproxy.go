// Package faultproxy is a TCP proxy that injects network faults between a client and a
// real server: latency with jitter, a bandwidth cap, hung connections, resets and a
// partition (the server unreachable). Tests and the chaos harness put it in front of
// Postgres, Redis or a broker to see how a service behaves when the network, not the
// server, misbehaves.
//
// Faults apply to connections already open as well as to new ones. Latency and the
// bandwidth cap delay every chunk forwarded in either direction. A hang holds every
// byte (the connections stay open and silent, new ones are accepted and never
// answered) until the hang ends, when the hung connections are closed. A partition
// resets every open connection and resets new ones as soon as they are accepted. Reset
// resets the open connections once.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Faults is the set of faults a Proxy applies. The zero value forwards faithfully.
type Faults struct {
	// Latency delays every chunk forwarded, in each direction, by Latency plus a
	// uniform random extra in [0, Jitter).
	Latency time.Duration
	Jitter  time.Duration
	// BytesPerSecond caps each direction of each connection (0: no cap).
	BytesPerSecond int
	// Hung holds every byte and accepts new connections without forwarding them; when
	// Hung turns false the connections opened or hung meanwhile are closed.
	Hung bool
	// Down resets every connection and every new one: the server is unreachable.
	Down bool
}

// Proxy forwards connections from its listener to a target address, applying Faults.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	faults  Faults
	changed chan struct{} // closed and replaced at every change of faults
	conns   map[*link]struct{}
	accepts int // connections accepted since Start
	closed  bool
	wg      sync.WaitGroup
}

// link is one proxied connection: the client's side and the server's.
type link struct {
	in, out net.Conn
	hung    bool // it saw a hang; closed when the hang ends
}

// Start listens on addr (e.g. "127.0.0.1:0") and forwards every connection to target.
func Start(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen %s: %w", addr, err)
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), conns: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set replaces the faults in force. Going down resets every open connection; ending a
// hang closes the connections it held.
func (p *Proxy) Set(f Faults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	wasHung := p.faults.Hung
	p.faults = f
	for l := range p.conns {
		switch {
		case f.Down:
			l.reset()
		case f.Hung:
			l.hung = true
		case wasHung && l.hung:
			l.reset()
		}
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// Clear removes every fault.
func (p *Proxy) Clear() { p.Set(Faults{}) }

// Reset resets every open connection once; new connections are forwarded as usual.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.conns {
		l.reset()
	}
}

// Conns returns the number of open proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted returns the number of connections accepted since Start (also those reset at
// once because the proxy was down).
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts
}

// Close stops accepting, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for l := range p.conns {
		l.reset()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(in)
	}
}

// state returns the faults in force and the channel closed at their next change.
func (p *Proxy) state() (Faults, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults, p.changed
}

func (p *Proxy) serve(in net.Conn) {
	defer p.wg.Done()
	l := &link{in: in}
	if !p.track(l) {
		resetConn(in)
		return
	}
	defer p.untrack(l)
	// While hung, a new connection is accepted and left unanswered; it is dialled only
	// once the hang ends (and then closed by Set, like every hung connection).
	if !p.waitUnhung(l) {
		return
	}
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		resetConn(in)
		return
	}
	p.mu.Lock()
	if p.closed || p.faults.Down || l.hung {
		p.mu.Unlock()
		out.Close()
		resetConn(in)
		return
	}
	l.out = out
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pipe(l, out, in); done <- struct{}{} }()
	go func() { p.pipe(l, in, out); done <- struct{}{} }()
	<-done
	in.Close()
	out.Close()
	<-done
}

// waitUnhung waits while the proxy is hung and reports whether l is still open.
func (p *Proxy) waitUnhung(l *link) bool {
	for {
		f, changed := p.state()
		if !f.Hung {
			p.mu.Lock()
			defer p.mu.Unlock()
			return !l.hung && !p.closed && !f.Down
		}
		p.mu.Lock()
		l.hung = true
		p.mu.Unlock()
		<-changed
	}
}

// pipe copies src to dst, chunk by chunk, applying the faults in force to each chunk.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		f, _ := p.state()
		n := len(buf)
		if f.BytesPerSecond > 0 {
			n = min(n, max(f.BytesPerSecond/10, 1)) // at least ten chunks a second
		}
		n, err := src.Read(buf[:n])
		if n > 0 {
			if !p.delay(n) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
			}
			return
		}
	}
}

// delay holds a chunk of n bytes for the faults in force (the latency, the bandwidth
// cap, a hang) and reports false if its connection was closed meanwhile.
func (p *Proxy) delay(n int) bool {
	for {
		f, changed := p.state()
		if f.Down {
			return false
		}
		if f.Hung {
			<-changed
			continue
		}
		d := f.Latency
		if f.Jitter > 0 {
			d += rand.N(f.Jitter)
		}
		if f.BytesPerSecond > 0 {
			d += time.Duration(n) * time.Second / time.Duration(f.BytesPerSecond)
		}
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
			return true
		case <-changed:
			t.Stop()
			// A new fault (a hang, a partition) applies to the chunk in hand; a fault
			// removed lets it through at once.
			if nf, _ := p.state(); !nf.Hung && !nf.Down {
				return true
			}
		}
	}
}

func (p *Proxy) track(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.accepts++
	if p.closed || p.faults.Down {
		return false
	}
	p.conns[l] = struct{}{}
	return true
}

func (p *Proxy) untrack(l *link) {
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
	l.in.Close()
	if l.out != nil {
		l.out.Close()
	}
}

// reset closes both sides of l with a TCP reset. Called with p.mu held.
func (l *link) reset() {
	resetConn(l.in)
	if l.out != nil {
		resetConn(l.out)
	}
}

// resetConn closes c so that its peer sees a reset rather than an orderly close.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
