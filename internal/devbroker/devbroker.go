// Package devbroker removes classic consumer-group members whose process is gone from a
// kfake cluster, so that a member killed with SIGKILL cannot wedge its group.
//
// kfake arms a member's session timer only when a JoinGroup or SyncGroup reply is handed
// to the member's connection (groups.go, (*group).reply calls updateHeartbeat only if
// clientReq.reply reports success, which for a closed connection is a coin flip), and
// moving a member from pending to joined stops the timer it had
// ((*group).addMemberAndRebalance → stopPending). A member that dies while its JoinGroup
// waits in the rebalance barrier therefore often stays in the group with no timer at
// all: it is removed only when a rebalance completes without it, and every new join
// restarts that rebalance's timer ((*group).rebalance), while the pending-sync timeout
// that would also catch it is cancelled by the leader's sync and by the next rebalance
// ((*group).clearPendingSync). See docs/reliability.md, "Consumer groups that survive
// kill -9".
//
// A [Guard] watches from the outside instead of changing kfake: its listener (pass
// [Guard.Listen] to kfake.ListenFn) wraps every client connection and reads the
// JoinGroup, SyncGroup, Heartbeat and LeaveGroup requests that pass through it, so it
// knows which connections speak for which member. Control functions
// (kfake.Cluster.ControlKey) would show the requests but not the connection they came
// on, which is what tells a dead process from a live one. Once every connection that
// spoke for a member is closed, the Guard waits a grace period (a dynamic member) or the
// member's session timeout (a static member, which may come back under the same
// instance id and take its partitions over without a rebalance), asks kfake which
// members the group has (kfake.Cluster.GroupInfo) and sends the broker a LeaveGroup for
// the member, as the member itself would have on a clean shutdown. A member that is
// merely slow or paused keeps its connections open and is left alone.
//
// A broker that requires TLS or SASL: give the TLS configuration to the Guard
// ([WithTLS]) instead of to kfake (kfake.TLS would encrypt above the Guard's listener,
// where the Guard could read no request), and the SASL credentials of a user of the
// broker to the Guard's own client ([WithClientOptions]). That client reaches the broker
// through an in-process connection handed to the listener, not through the network, so
// it needs no certificate, also when the broker requires client certificates.
//
// The Guard also spaces the SASL attempts of a client address after a failed one
// ([WithSASLDelay]): the next attempt waits for its turn, and every failure doubles the
// space, over all of the address's connections, so a password cannot be guessed at the
// speed of the network. A failure is a connection closed after a SASLAuthenticate that
// no other request followed (kfake closes the connection on a wrong password).
//
// A broker behind a proxy: [WithAdvertise] makes the Guard's listener report another
// address than the one it listens on. kfake advertises its listener's address in every
// Metadata, FindCoordinator and DescribeCluster answer, so clients bootstrapped through
// the proxy make every later connection through it too, not only the first.
package devbroker

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Defaults of the Guard's options.
const (
	// DefaultGrace is how long a dynamic member's connections must all have been closed
	// before it is removed: long enough for a live client to reconnect after losing a
	// connection (kgo retries a request on a new connection within a second or two).
	DefaultGrace = 3 * time.Second
	// DefaultInterval is how often the Guard looks for members to remove.
	DefaultInterval = 500 * time.Millisecond
)

// ErrInvalidConfig is returned by New for an invalid option.
var ErrInvalidConfig = errors.New("devbroker: invalid configuration")

// maxObservedRequest bounds the size of a group request the Guard decodes; larger
// frames (never a group request in practice) pass through unread.
const maxObservedRequest = 1 << 20

type config struct {
	grace      time.Duration
	interval   time.Duration
	logger     *slog.Logger
	tls        *tls.Config
	clientOpts []kgo.Opt
	advertise  string
	saslDelay  time.Duration
	saslMax    time.Duration
}

// Option configures a Guard. An invalid value makes New return an error wrapping
// ErrInvalidConfig.
type Option func(*config) error

// WithGrace sets how long all of a dynamic member's connections must have been closed
// before it is removed (default DefaultGrace). Static members wait for their session
// timeout if it is longer.
func WithGrace(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: grace %s must be positive", ErrInvalidConfig, d)
		}
		c.grace = d
		return nil
	}
}

// WithInterval sets how often the Guard checks (default DefaultInterval).
func WithInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: interval %s must be positive", ErrInvalidConfig, d)
		}
		c.interval = d
		return nil
	}
}

// WithLogger sets the logger of removals (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidConfig)
		}
		c.logger = l
		return nil
	}
}

// WithTLS makes the Guard's listener serve TLS with cfg (which may require client
// certificates), below the Guard's reading of requests. Use it instead of kfake.TLS.
// Default: plaintext.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) error {
		if cfg == nil {
			return fmt.Errorf("%w: nil TLS configuration", ErrInvalidConfig)
		}
		c.tls = cfg
		return nil
	}
}

// WithClientOptions adds options to the client the Guard sends LeaveGroup requests with,
// e.g. kgo.SASL with the credentials of one of the broker's users when it requires SASL.
// The client dials in process (kgo.Dialer is taken), so TLS options do not apply.
// Default: none.
func WithClientOptions(opts ...kgo.Opt) Option {
	return func(c *config) error { c.clientOpts = append(c.clientOpts, opts...); return nil }
}

// WithAdvertise makes the listener report addr (host:port) as its address, which kfake
// advertises to clients as the broker's, e.g. a fault proxy in front of the broker.
// It applies to every listener of the Guard, so use it with a single-broker cluster.
// Default: the address listened on.
func WithAdvertise(addr string) Option {
	return func(c *config) error {
		if err := CheckAdvertise(addr); err != nil {
			return fmt.Errorf("%w: advertise: %w", ErrInvalidConfig, err)
		}
		c.advertise = addr
		return nil
	}
}

// WithSASLDelay sets the spacing of a client address's SASL attempts after a failed one:
// base after the first failure, doubling with each further failure up to max, across
// all of the address's connections (default DefaultSASLDelay, DefaultSASLMaxDelay). An
// attempt whose turn is more than four times DefaultSASLMaxDelay away has its connection
// closed. An address starts again at no delay ten minutes after its last failure.
func WithSASLDelay(base, max time.Duration) Option {
	return func(c *config) error {
		if base <= 0 || max < base {
			return fmt.Errorf("%w: SASL delay %s up to %s: want a positive delay up to a maximum at least as long", ErrInvalidConfig, base, max)
		}
		c.saslDelay, c.saslMax = base, max
		return nil
	}
}

// memberKey names a member by id, or a static member by instance id.
type memberKey struct {
	group    string
	id       string
	instance bool // id is an instance id
}

// record is what the Guard knows of one member (or one instance id).
type record struct {
	conns          map[*conn]struct{} // open connections that spoke for it
	lastSeen       time.Time          // last request naming it, or last of its connections closing
	sessionTimeout time.Duration      // from its last JoinGroup; 0 if not seen
}

// Guard removes group members whose connections are all gone; see the package
// documentation. Create it with New, pass Listen to kfake.ListenFn, then call Start with
// the cluster and Close before closing the cluster.
type Guard struct {
	cfg config

	mu        sync.Mutex
	records   map[memberKey]*record
	listeners map[string]*listener // by address, for the Guard's own in-process dials

	sasl *saslThrottle

	cluster *kfake.Cluster
	client  *kgo.Client
	cancel  context.CancelFunc
	done    chan struct{}
}

// New returns a Guard. It watches nothing until its listener is used and Start is called.
func New(opts ...Option) (*Guard, error) {
	cfg := config{grace: DefaultGrace, interval: DefaultInterval, logger: slog.Default(),
		saslDelay: DefaultSASLDelay, saslMax: DefaultSASLMaxDelay}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Guard{cfg: cfg, records: make(map[memberKey]*record), listeners: make(map[string]*listener),
		sasl: newSASLThrottle(cfg.saslDelay, cfg.saslMax)}, nil
}

// Listen listens like net.Listen and wraps every accepted connection (in TLS first,
// with [WithTLS]) so that the Guard sees its group requests and its closing. Pass it to
// kfake.ListenFn.
func (g *Guard) Listen(network, address string) (net.Listener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	l := &listener{Listener: ln, g: g, accepted: make(chan accepted), local: make(chan net.Conn), done: make(chan struct{})}
	if g.cfg.advertise != "" {
		l.advertised = advertisedAddr(g.cfg.advertise)
	}
	go l.pump()
	g.mu.Lock()
	g.listeners[l.Addr().String()] = l
	g.mu.Unlock()
	return l, nil
}

// ListenAddrs returns the addresses the Guard's listeners listen on, which differ from
// the cluster's (kfake.Cluster.ListenAddrs, the advertised ones) with [WithAdvertise].
func (g *Guard) ListenAddrs() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.listeners))
	for _, l := range g.listeners {
		out = append(out, l.Listener.Addr().String())
	}
	return out
}

// CheckAdvertise reports whether addr can be advertised: host:port with a host and a
// port in 1–65535.
func CheckAdvertise(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("%q has no host", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port must be a number in 1–65535", addr)
	}
	return nil
}

// advertisedAddr is the address a listener reports with WithAdvertise.
type advertisedAddr string

func (advertisedAddr) Network() string  { return "tcp" }
func (a advertisedAddr) String() string { return string(a) }

// dial connects the Guard's own client to the listener at address in process.
func (g *Guard) dial(ctx context.Context, _, address string) (net.Conn, error) {
	g.mu.Lock()
	l := g.listeners[address]
	g.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("devbroker: no listener of the Guard at %s", address)
	}
	client, server := net.Pipe()
	var err error
	select {
	case l.local <- server:
		return client, nil
	case <-l.done:
		err = net.ErrClosed
	case <-ctx.Done():
		err = ctx.Err()
	}
	client.Close()
	server.Close()
	return nil, fmt.Errorf("devbroker: dial %s: %w", address, err)
}

// Start begins removing dead members of c's groups, talking to c through a client of
// its own. Call it once, after kfake.NewCluster.
func (g *Guard) Start(c *kfake.Cluster) error {
	opts := append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ClientID("devkafka-guard")}, g.cfg.clientOpts...)
	cl, err := kgo.NewClient(append(opts, kgo.Dialer(g.dial))...)
	if err != nil {
		return fmt.Errorf("devbroker: client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cluster, g.client, g.cancel, g.done = c, cl, cancel, make(chan struct{})
	go g.run(ctx)
	return nil
}

// Close stops the Guard and waits for it. Call it before closing the cluster: kfake's
// GroupInfo blocks on a closed cluster.
func (g *Guard) Close() {
	if g.cancel == nil {
		return
	}
	g.cancel()
	<-g.done
	g.client.Close()
	g.cancel = nil
}

func (g *Guard) run(ctx context.Context) {
	defer close(g.done)
	t := time.NewTicker(g.cfg.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.sweep(ctx)
		}
	}
}

// groups returns the groups the Guard holds records for.
func (g *Guard) groups() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for k := range g.records {
		if !seen[k.group] {
			seen[k.group] = true
			out = append(out, k.group)
		}
	}
	return out
}

// eviction is a member to remove and why.
type eviction struct {
	group, member string
	instance      *string
	silent        time.Duration
}

func (g *Guard) sweep(ctx context.Context) {
	for _, group := range g.groups() {
		if ctx.Err() != nil {
			return
		}
		info := g.cluster.GroupInfo(group)
		for _, ev := range g.dead(group, info, time.Now()) {
			g.evict(ctx, ev)
		}
	}
}

// dead returns the members of group (as kfake describes it in info) whose connections
// are all closed for long enough, and forgets records of members the group no longer has.
func (g *Guard) dead(group string, info *kfake.GroupInfo, now time.Time) []eviction {
	g.mu.Lock()
	defer g.mu.Unlock()
	current := map[memberKey]bool{}
	var out []eviction
	if info != nil {
		for _, m := range info.Members {
			keys := []memberKey{{group: group, id: m.MemberID}}
			if m.InstanceID != nil {
				keys = append(keys, memberKey{group: group, id: *m.InstanceID, instance: true})
			}
			var (
				known, open bool
				last        time.Time
				session     time.Duration
			)
			for _, k := range keys {
				current[k] = true
				r := g.records[k]
				if r == nil {
					continue
				}
				known = true
				open = open || len(r.conns) > 0
				if r.lastSeen.After(last) {
					last = r.lastSeen
				}
				session = max(session, r.sessionTimeout)
			}
			if !known || open {
				// Unknown: joined before this process started (restored from the data
				// directory); kfake's own timers cover it.
				continue
			}
			wait := g.cfg.grace
			if m.InstanceID != nil {
				wait = max(wait, session)
			}
			if silent := now.Sub(last); silent >= wait {
				out = append(out, eviction{group: group, member: m.MemberID, instance: m.InstanceID, silent: silent})
				for _, k := range keys {
					delete(g.records, k)
				}
			}
		}
	}
	for k, r := range g.records {
		if k.group == group && !current[k] && len(r.conns) == 0 {
			delete(g.records, k)
		}
	}
	return out
}

// evict sends the broker a LeaveGroup for the member, by member id only: an instance id
// would remove whichever member holds it now, possibly the instance's replacement.
func (g *Guard) evict(ctx context.Context, ev eviction) {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = ev.group
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = ev.member
	reason := "devkafka: every connection of the member closed"
	m.Reason = &reason
	req.Members = append(req.Members, m)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	attrs := []any{"group", ev.group, "member", ev.member, "silent_for", ev.silent.Round(time.Millisecond)}
	if ev.instance != nil {
		attrs = append(attrs, "instance", *ev.instance)
	}
	resp, err := req.RequestWith(rctx, g.client)
	if err == nil && len(resp.Members) == 1 {
		err = kerr.ErrorForCode(resp.Members[0].ErrorCode)
	}
	if err == nil && resp != nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		g.cfg.logger.Warn("devkafka: could not remove a group member whose connections closed", append(attrs, "err", err)...)
		return
	}
	g.cfg.logger.Warn("devkafka: removed a group member whose connections all closed (process gone without leaving)", attrs...)
}

// observe records what one client request says about group members.
func (g *Guard) observe(c *conn, body []byte) {
	r := kbin.Reader{Src: body}
	key, version := r.Int16(), r.Int16()
	r.Int32()          // correlation id
	r.NullableString() // client id
	req := kmsg.RequestForKey(key)
	if req == nil {
		return
	}
	req.SetVersion(version)
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if !r.Ok() || req.ReadFrom(r.Src) != nil {
		return
	}
	switch req := req.(type) {
	case *kmsg.JoinGroupRequest:
		g.touch(c, req.Group, req.MemberID, req.InstanceID, time.Duration(req.SessionTimeoutMillis)*time.Millisecond)
	case *kmsg.SyncGroupRequest:
		g.touch(c, req.Group, req.MemberID, req.InstanceID, 0)
	case *kmsg.HeartbeatRequest:
		g.touch(c, req.Group, req.MemberID, req.InstanceID, 0)
	case *kmsg.LeaveGroupRequest:
		members := req.Members
		if req.Version < 3 {
			members = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
		}
		g.forget(req.Group, members)
	}
}

func (g *Guard) touch(c *conn, group, memberID string, instanceID *string, session time.Duration) {
	var keys []memberKey
	if memberID != "" {
		keys = append(keys, memberKey{group: group, id: memberID})
	}
	if instanceID != nil {
		keys = append(keys, memberKey{group: group, id: *instanceID, instance: true})
	}
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.closed {
		return
	}
	for _, k := range keys {
		r := g.records[k]
		if r == nil {
			r = &record{conns: map[*conn]struct{}{}}
			g.records[k] = r
		}
		r.conns[c] = struct{}{}
		r.lastSeen = now
		if session > 0 {
			r.sessionTimeout = session
		}
		c.keys[k] = struct{}{}
	}
}

// forget drops the records of members that left the group themselves.
func (g *Guard) forget(group string, members []kmsg.LeaveGroupRequestMember) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range members {
		if m.MemberID != "" {
			g.dropLocked(memberKey{group: group, id: m.MemberID})
		}
		if m.InstanceID != nil {
			g.dropLocked(memberKey{group: group, id: *m.InstanceID, instance: true})
		}
	}
}

func (g *Guard) dropLocked(k memberKey) {
	r := g.records[k]
	if r == nil {
		return
	}
	for c := range r.conns {
		delete(c.keys, k)
	}
	delete(g.records, k)
}

// closed records that c is gone.
func (g *Guard) closed(c *conn) {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	c.closed = true
	for k := range c.keys {
		if r := g.records[k]; r != nil {
			delete(r.conns, c)
			if len(r.conns) == 0 {
				r.lastSeen = now
			}
		}
	}
	c.keys = nil
}

// listener accepts the network's connections (through pump) and the Guard's own
// in-process ones (local).
type listener struct {
	net.Listener
	g          *Guard
	advertised net.Addr // WithAdvertise; nil: the address listened on
	accepted   chan accepted
	local      chan net.Conn
	done       chan struct{}
	closeOnce  sync.Once
}

type accepted struct {
	c   net.Conn
	err error
}

// pump hands the network listener's connections and its final error to Accept.
func (l *listener) pump() {
	for {
		c, err := l.Listener.Accept()
		select {
		case l.accepted <- accepted{c, err}:
		case <-l.done:
			if c != nil {
				c.Close()
			}
			return
		}
		if err != nil {
			var te interface{ Temporary() bool }
			if !errors.As(err, &te) || !te.Temporary() {
				return
			}
		}
	}
}

func (l *listener) Accept() (net.Conn, error) {
	var nc net.Conn
	local := false
	select {
	case a := <-l.accepted:
		if a.err != nil {
			return nil, a.err
		}
		nc = a.c
		if l.g.cfg.tls != nil {
			nc = tls.Server(nc, l.g.cfg.tls)
		}
	case nc = <-l.local:
		local = true
	case <-l.done:
		return nil, net.ErrClosed
	}
	c := &conn{Conn: nc, g: l.g, keys: map[memberKey]struct{}{}}
	if !local { // the Guard's own client authenticates with a user's credentials
		c.addr = hostOf(nc.RemoteAddr())
	}
	return c, nil
}

// Addr is the address kfake advertises: WithAdvertise's, or the one listened on.
func (l *listener) Addr() net.Addr {
	if l.advertised != nil {
		return l.advertised
	}
	return l.Listener.Addr()
}

func (l *listener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() {
		close(l.done)
		l.g.mu.Lock()
		delete(l.g.listeners, l.Addr().String())
		l.g.mu.Unlock()
	})
	return err
}

// conn follows the request frames read from a client connection (4-byte size, then the
// request: key, version, correlation id, client id, body) and hands group requests to
// the Guard. kfake reads a connection from one goroutine at a time, so the parsing state
// needs no lock; keys and closed are guarded by the Guard's mutex.
type conn struct {
	net.Conn
	g *Guard

	size      [4]byte
	sizeN     int
	frame     int    // size of the current frame
	remaining int    // bytes left in the current frame
	head      []byte // the frame's first bytes until its key is known, then its body if observed
	observe   bool
	closeOnce sync.Once

	// SASL throttling (saslthrottle.go): addr is the client's IP ("" for the Guard's own
	// connections); an authentication step is pending from its request until the next
	// request shows it succeeded, or the connection closes (it failed).
	addr        string
	saslFrame   bool          // the current frame is a SASLAuthenticate request
	saslPending bool          // a SASLAuthenticate was not followed by another request yet
	hold        time.Duration // how long Read holds the frame just read back
	refuse      bool          // the address has too many attempts queued: close

	keys   map[memberKey]struct{}
	closed bool
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.feed(p[:n])
	if c.refuse {
		c.Close()
		return 0, errSASLThrottled
	}
	if d := c.hold; d > 0 {
		c.hold = 0
		time.Sleep(d) // at most saslMaxQueue: the address's turn
	}
	return n, err
}

// errSASLThrottled ends a connection whose SASL attempt was refused.
var errSASLThrottled = errors.New("devbroker: too many failed SASL attempts from this address")

func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		if c.saslPending && c.addr != "" {
			c.g.sasl.failed(c.addr)
		}
		c.g.closed(c)
	})
	return c.Conn.Close()
}

// request notes the key of a new request frame: the authentication step before it, if
// any, succeeded.
func (c *conn) request(key int16) {
	c.saslPending = false
	c.saslFrame = kmsg.Key(key) == kmsg.SASLAuthenticate && c.addr != ""
}

// frameDone schedules a SASLAuthenticate request that was just read whole: Read holds
// it back until the address's turn, or refuses it.
func (c *conn) frameDone() {
	if !c.saslFrame {
		return
	}
	c.saslFrame, c.saslPending = false, true
	wait, ok := c.g.sasl.wait(c.addr)
	c.hold, c.refuse = wait, !ok
}

func (c *conn) feed(p []byte) {
	for len(p) > 0 {
		if c.remaining == 0 {
			k := copy(c.size[c.sizeN:], p)
			c.sizeN += k
			p = p[k:]
			if c.sizeN < 4 {
				return
			}
			c.sizeN = 0
			c.frame = int(binary.BigEndian.Uint32(c.size[:]))
			c.remaining = c.frame
			c.head, c.observe = c.head[:0], false
			continue
		}
		k := min(len(p), c.remaining)
		chunk := p[:k]
		p = p[k:]
		c.remaining -= k
		switch {
		case c.observe:
			c.head = append(c.head, chunk...)
		case len(c.head) < 2:
			take := min(len(chunk), 2-len(c.head))
			c.head = append(c.head, chunk[:take]...)
			if len(c.head) == 2 {
				key := int16(binary.BigEndian.Uint16(c.head))
				c.request(key)
				if c.wanted(key) {
					c.observe = true
					c.head = append(c.head, chunk[take:]...)
				}
			}
		}
		if c.remaining == 0 {
			c.frameDone()
		}
		if c.remaining == 0 && c.observe {
			c.g.observe(c, c.head)
			c.observe = false
		}
	}
}

// wanted reports whether a frame with this request key is decoded.
func (c *conn) wanted(key int16) bool {
	if c.frame > maxObservedRequest {
		return false
	}
	switch kmsg.Key(key) {
	case kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.LeaveGroup:
		return true
	}
	return false
}
