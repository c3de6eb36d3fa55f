package devbroker

import (
	"fmt"
	"testing"
	"time"
)

// TestSASLThrottle: after a failure an address's attempts are spaced, the space doubles
// with each failure up to the maximum, attempts queued too far ahead are refused, other
// addresses are not affected, an address is forgotten ten minutes after its last
// failure, and at most saslMaxAddrs addresses are remembered.
func TestSASLThrottle(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	th := newSASLThrottle(100*time.Millisecond, time.Second)
	th.now = func() time.Time { return now }
	const a, b = "127.0.0.2", "127.0.0.3"
	if d, ok := th.wait(a); d != 0 || !ok {
		t.Fatalf("first attempt waits %v, %v", d, ok)
	}
	var want []time.Duration
	for i := range 6 {
		th.failed(a)
		want = append(want, min(100*time.Millisecond<<i, time.Second))
		now = now.Add(time.Millisecond) // the next guess comes at once
		d, ok := th.wait(a)
		if !ok || d != want[i]-time.Millisecond {
			t.Fatalf("after %d failures: wait %v (%v), want %v", i+1, d, ok, want[i]-time.Millisecond)
		}
		now = now.Add(d)
	}
	// Many connections guessing at once queue behind each other, then are refused.
	var queued time.Duration
	for range 100 {
		d, ok := th.wait(a)
		if !ok {
			break
		}
		if d < queued {
			t.Fatalf("a later attempt waits %v, less than an earlier one's %v", d, queued)
		}
		queued = d
	}
	if queued < saslMaxQueue-time.Second || queued > saslMaxQueue {
		t.Fatalf("parallel attempts queued up to %v, want about %v before refusal", queued, saslMaxQueue)
	}
	if d, ok := th.wait(a); ok {
		t.Fatalf("an attempt %v ahead was not refused", d)
	}
	if d, ok := th.wait(b); d != 0 || !ok {
		t.Fatalf("another address waits %v, %v", d, ok)
	}
	now = now.Add(saslForget + saslMaxQueue + time.Second)
	if d, ok := th.wait(a); d != 0 || !ok {
		t.Fatalf("after %v without failure: wait %v, %v", saslForget, d, ok)
	}

	for i := range saslMaxAddrs + 10 {
		now = now.Add(time.Millisecond)
		th.failed(fmt.Sprintf("10.0.%d.%d", i/256, i%256))
	}
	if n := len(th.addrs); n > saslMaxAddrs {
		t.Fatalf("%d addresses remembered, want at most %d", n, saslMaxAddrs)
	}
}
