package devbroker

import (
	"net"
	"sync"
	"time"
)

// Defaults of the SASL throttle ([WithSASLDelay]).
const (
	// DefaultSASLDelay is the wait before the next SASL attempt of an address after its
	// first failure; it doubles with each further failure, up to DefaultSASLMaxDelay.
	DefaultSASLDelay    = 100 * time.Millisecond
	DefaultSASLMaxDelay = 5 * time.Second
	// saslMaxQueue bounds how far ahead an address's attempts are scheduled: an attempt
	// that would wait longer (many connections guessing at once) is refused, its
	// connection closed, instead of holding a goroutine that long.
	saslMaxQueue = 4 * DefaultSASLMaxDelay
	// saslForget is how long after its last failure an address starts again at no delay.
	saslForget = 10 * time.Minute
	// saslMaxAddrs bounds the addresses remembered: past it, the stalest is forgotten.
	saslMaxAddrs = 4096
)

// saslThrottle spaces the SASL authentication attempts of each client address after a
// failure: an address's attempt waits for its turn, and each failure doubles the space
// between turns (from base up to max), whatever the number of connections the address
// guesses over. A failure is a connection closed with an authentication step
// unanswered by a next request (kfake closes the connection on a wrong password).
type saslThrottle struct {
	base, max time.Duration
	now       func() time.Time

	mu    sync.Mutex
	addrs map[string]*saslAddr
}

type saslAddr struct {
	failures int
	last     time.Time // last failure
	next     time.Time // earliest start of the next attempt
}

func newSASLThrottle(base, max time.Duration) *saslThrottle {
	return &saslThrottle{base: base, max: max, now: time.Now, addrs: make(map[string]*saslAddr)}
}

// wait returns how long an attempt of addr must wait before it reaches the broker, and
// false if it must be refused (its turn is more than saslMaxQueue away).
func (t *saslThrottle) wait(addr string) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.addrs[addr]
	now := t.now()
	if a == nil || a.failures == 0 || now.Sub(a.last) > saslForget {
		return 0, true
	}
	start := a.next
	if start.Before(now) {
		start = now
	}
	if start.Sub(now) > saslMaxQueue {
		return 0, false
	}
	a.next = start.Add(t.delay(a.failures))
	return start.Sub(now), true
}

// failed records a failed attempt of addr.
func (t *saslThrottle) failed(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	a := t.addrs[addr]
	if a == nil {
		if len(t.addrs) >= saslMaxAddrs {
			t.forgetStalestLocked()
		}
		a = &saslAddr{}
		t.addrs[addr] = a
	}
	if now.Sub(a.last) > saslForget {
		a.failures = 0
	}
	a.failures++
	a.last = now
	if min := now.Add(t.delay(a.failures)); a.next.Before(min) {
		a.next = min
	}
}

// delay is the space between two attempts after failures failures.
func (t *saslThrottle) delay(failures int) time.Duration {
	d := t.base
	for i := 1; i < failures && d < t.max; i++ {
		d *= 2
	}
	return min(d, t.max)
}

func (t *saslThrottle) forgetStalestLocked() {
	var stalest string
	var at time.Time
	for k, a := range t.addrs {
		if stalest == "" || a.last.Before(at) {
			stalest, at = k, a.last
		}
	}
	delete(t.addrs, stalest)
}

// hostOf returns the IP of a connection's remote address, or the whole address.
func hostOf(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	s := addr.String()
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}
