package app

import (
	"crypto/subtle"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Names of the admin listener's variables of [LoadConfig].
const (
	envAdminAddr  = "ADMIN_ADDR"
	envAdminToken = "ADMIN_TOKEN"
)

// Defaults of [HTTPLimits], the bounds of the public HTTP server.
const (
	defaultReadHeaderTimeout = 10 * time.Second
	defaultReadTimeout       = 30 * time.Second
	defaultRequestTimeout    = 30 * time.Second
	defaultWriteTimeout      = 45 * time.Second
	defaultIdleTimeout       = 2 * time.Minute
	defaultMaxConns          = 1024
	// defaultAdminPortOffset is added to HTTP_ADDR's port to make the default
	// ADMIN_ADDR: 127.0.0.1:9080 for HTTP_ADDR :8080.
	defaultAdminPortOffset = 1000
)

// HTTPLimits bound what one client can hold of the public HTTP server. A zero field
// takes its default.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading a request's headers (default
	// defaultReadHeaderTimeout).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included (default
	// defaultReadTimeout): a client that sends its body slowly is cut off.
	ReadTimeout time.Duration
	// RequestTimeout is each request's deadline: its context is cancelled then and, if
	// the handler had not started its answer, the client gets 503 {"error":{"code":
	// "timeout"}} (default defaultRequestTimeout). The handler runs on the connection's
	// goroutine and must return when its context ends (one that ignores it is bounded
	// by WriteTimeout only).
	RequestTimeout time.Duration
	// WriteTimeout bounds writing a response, from the end of the request's headers
	// (default defaultWriteTimeout).
	WriteTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections (default defaultIdleTimeout).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers; larger ones get 431 (default
	// DefaultMaxHeaderBytes).
	MaxHeaderBytes int
	// MaxConns caps the open connections (default defaultMaxConns). When they are all
	// open, a new connection closes the one that has been idle longest (between two
	// requests), so idle keep-alive connections cannot keep others out; with none idle,
	// it closes the oldest unfinished connection (accepted, its first request not read
	// yet: never-sending and slowloris clients) of the client holding the most
	// connections, provided that client holds at least as many as the newcomer's, so
	// clients that open connections from several addresses and send nothing lose them
	// to a client that sends requests. When every connection is serving a request (or
	// belongs to a client holding fewer), the new one waits until one closes or goes
	// idle, and the later ones wait in the kernel's accept queue.
	MaxConns int
	// MaxConnsPerClient caps the connections of one client (default
	// DefaultMaxConnsPerClient, at most MaxConns; negative: no cap): an IPv4 address, or
	// the /64 prefix of an IPv6 one. A new connection over it closes that client's
	// longest-idle connection, or is closed at once when the client uses all of its
	// share. Clients behind one proxy share its IP: raise it, or turn it off, there.
	MaxConnsPerClient int
}

func (l HTTPLimits) withDefaults() HTTPLimits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.ReadHeaderTimeout, defaultReadHeaderTimeout)
	def(&l.ReadTimeout, defaultReadTimeout)
	def(&l.RequestTimeout, defaultRequestTimeout)
	def(&l.WriteTimeout, defaultWriteTimeout)
	def(&l.IdleTimeout, defaultIdleTimeout)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConns <= 0 {
		l.MaxConns = defaultMaxConns
	}
	if l.MaxConnsPerClient == 0 {
		l.MaxConnsPerClient = min(DefaultMaxConnsPerClient, l.MaxConns)
	}
	return l
}

// WithHTTPLimits sets the bounds of the public HTTP server. Default: HTTPLimits{} (every
// field at its default).
func WithHTTPLimits(l HTTPLimits) Option {
	return func(o *options) error { o.httpLimits = l; return nil }
}

// WithAdminListener makes Run serve the admin endpoints (/healthz, /readyz with each
// check's error, /metrics) on ln instead of listening on Config.AdminAddr. Run closes it.
// With WithListener and without WithAdminListener, the admin endpoints are served on the
// WithListener listener (tests).
func WithAdminListener(ln net.Listener) Option {
	return func(o *options) error {
		if ln == nil {
			return invalid("WithAdminListener: nil listener")
		}
		o.adminListener = ln
		return nil
	}
}

// defaultAdminAddr returns the loopback address defaultAdminPortOffset above httpAddr's
// port, or 127.0.0.1:0 (any free port, see App.AdminAddr) when httpAddr asks for any
// free port or the sum is not a port.
func defaultAdminAddr(httpAddr string) string {
	_, port, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return ""
	}
	p, err := strconv.Atoi(port)
	if err != nil || p == 0 || p+defaultAdminPortOffset > 65535 {
		return "127.0.0.1:0"
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p+defaultAdminPortOffset))
}

// newServer returns an HTTP server for h with the limits l but the request deadline,
// which h's endpoints apply each (withRequestTimeout), so that a route's admission
// control can shed a request before the deadline's timer exists.
func newServer(h http.Handler, l HTTPLimits) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// connLimiter is the listener of an HTTP server: it holds at most MaxConns connections
// and MaxConnsPerClient per client, and makes room under pressure by closing idle
// connections first, then unfinished ones (that have not sent a whole request yet) of
// the client holding the most connections (see HTTPLimits.MaxConns).
type connLimiter struct {
	net.Listener
	sem       chan struct{}
	perClient int // 0: no per-client cap

	closed    chan struct{}
	closeOnce sync.Once

	mu    sync.Mutex
	conns map[*limitConn]struct{}
	byKey map[string]int // open connections per client (clientKey)
}

// limitConns returns ln limited by l, and sets srv.ConnState to follow each connection's
// state.
func limitConns(srv *http.Server, ln net.Listener, l HTTPLimits) net.Listener {
	cl := &connLimiter{Listener: ln, sem: make(chan struct{}, l.MaxConns), closed: make(chan struct{}),
		conns: make(map[*limitConn]struct{}), byKey: make(map[string]int)}
	if l.MaxConnsPerClient > 0 && l.MaxConnsPerClient < l.MaxConns {
		cl.perClient = l.MaxConnsPerClient
	}
	srv.ConnState = cl.connState
	return cl
}

// evictPoll is how often a connection waiting for a slot looks again for one to close.
const evictPoll = 50 * time.Millisecond

// connPhase is where a connection is in its life, as far as eviction is concerned.
type connPhase uint8

const (
	phaseUnfinished connPhase = iota // accepted, its first request not read yet
	phaseActive                      // serving a request
	phaseIdle                        // between two requests
	phaseEvicted                     // chosen for closing
)

// Accept takes the next connection from the kernel and finds it a slot: a free one, or
// one made by closing an idle connection or an unfinished one of a client that holds at
// least as many connections. A client at MaxConnsPerClient with no idle connection has
// the new one closed at once. A new connection that finds every slot busy serving
// requests (or held by lighter clients) waits for one, and so do the connections behind
// it in the kernel's accept queue.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := clientKey(c)
		l.mu.Lock()
		over := l.perClient > 0 && l.byKey[key] >= l.perClient
		l.mu.Unlock()
		if over && !l.evict(key, "") {
			// The client holds its share and uses all of it: refuse this one.
			_ = c.Close()
			continue
		}
		if !l.acquire(key) {
			_ = c.Close()
			continue
		}
		lc := &limitConn{Conn: c, l: l, key: key, since: time.Now()}
		l.mu.Lock()
		l.conns[lc] = struct{}{}
		l.byKey[key]++
		l.mu.Unlock()
		return lc, nil
	}
}

// acquire takes a slot for a new connection of client key, evicting one if the server is
// full, and waits while none can be evicted. It reports false when the listener is
// closed meanwhile.
func (l *connLimiter) acquire(key string) bool {
	for {
		select {
		case l.sem <- struct{}{}:
			return true
		default:
		}
		l.evict("", key)
		select {
		case l.sem <- struct{}{}:
			return true
		case <-l.closed:
			return false
		case <-time.After(evictPoll):
		}
	}
}

// Close closes the listener and ends a wait for a slot.
func (l *connLimiter) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// evict closes one connection to make room and reports whether there was one to close.
// With of set, it closes the longest-idle connection of client of. Otherwise it closes
// the longest-idle connection of any client, or else the oldest unfinished connection
// (one that has not sent a whole request yet) of the client holding the most
// connections, if that client holds at least as many as client newcomer: a client that
// opens connections and sends nothing on them loses its own first, and one that holds
// fewer is never evicted for it.
func (l *connLimiter) evict(of, newcomer string) bool {
	l.mu.Lock()
	var idle, unfinished *limitConn
	for c := range l.conns {
		switch {
		case of != "" && c.key != of:
		case c.phase == phaseIdle:
			if idle == nil || c.since.Before(idle.since) {
				idle = c
			}
		case of == "" && c.phase == phaseUnfinished:
			if unfinished == nil {
				unfinished = c
				continue
			}
			if n, m := l.byKey[c.key], l.byKey[unfinished.key]; n > m || (n == m && c.since.Before(unfinished.since)) {
				unfinished = c
			}
		}
	}
	victim := idle
	if victim == nil && unfinished != nil && l.byKey[unfinished.key] >= l.byKey[newcomer] {
		victim = unfinished
	}
	if victim != nil {
		victim.phase = phaseEvicted // not chosen twice
	}
	l.mu.Unlock()
	if victim == nil {
		return false
	}
	_ = victim.Close()
	return true
}

// connState is the server's ConnState hook: it follows each connection's phase.
func (l *connLimiter) connState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitConn)
	if !ok {
		return
	}
	l.mu.Lock()
	if lc.phase != phaseEvicted {
		switch st {
		case http.StateIdle:
			lc.phase, lc.since = phaseIdle, time.Now()
		case http.StateActive, http.StateHijacked:
			lc.phase = phaseActive
		}
	}
	l.mu.Unlock()
}

// clientKey names the client of c for MaxConnsPerClient and eviction: its IPv4
// address, or the /64 prefix of its IPv6 address (one host's usual allocation).
func clientKey(c net.Conn) string {
	addr := c.RemoteAddr().String()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() != nil {
		return host
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

type limitConn struct {
	net.Conn
	l     *connLimiter
	key   string
	phase connPhase // guarded by l.mu
	since time.Time // guarded by l.mu: when it was accepted, or went idle
	once  sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		if c.l.byKey[c.key]--; c.l.byKey[c.key] <= 0 {
			delete(c.l.byKey, c.key)
		}
		c.l.mu.Unlock()
		<-c.l.sem
	})
	return err
}

// publicReady wraps a /readyz handler for the public listener: it keeps the status code
// and drops the checks' errors, which name hosts, users and databases.
func publicReady(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusOnly{header: http.Header{}}
		h.ServeHTTP(rec, r)
		code := rec.code
		if code == 0 {
			code = http.StatusOK
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		if code == http.StatusOK {
			_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
		} else {
			_, _ = w.Write([]byte(`{"status":"unavailable"}` + "\n"))
		}
	})
}

// statusOnly is a ResponseWriter that keeps only the status code.
type statusOnly struct {
	header http.Header
	code   int
}

func (s *statusOnly) Header() http.Header { return s.header }
func (s *statusOnly) Write(p []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return len(p), nil
}
func (s *statusOnly) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
}

// RequireBearer returns h behind a bearer token: a request without the header
// "Authorization: Bearer <token>" gets 401 and never reaches h. The comparison takes
// the same time whatever the token sent. An empty token returns h unchanged.
func RequireBearer(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="choreo"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"code":"unauthorized","message":"a valid bearer token is required"}}` + "\n"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Loopback reports whether the listen address addr ([host]:port) accepts connections
// from this host only: a loopback IP or "localhost". An empty host or an unspecified
// address (":8080", "0.0.0.0:8080", "[::]:8080") listens on every interface.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
