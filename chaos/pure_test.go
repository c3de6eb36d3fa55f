package chaos

import (
	"context"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

// TestSocketOwnership checks the /proc lookup that finds the relay leader: the local
// port of a connection this process opened maps to one of this process's socket inodes.
func TestSocketOwnership(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	port := c.LocalAddr().(*net.TCPAddr).Port
	inodes := localPortInodes()[port]
	if len(inodes) == 0 {
		t.Fatalf("no socket with local port %d in /proc/net/tcp", port)
	}
	mine := socketInodes(os.Getpid())
	found := false
	for _, in := range inodes {
		found = found || mine[in]
	}
	if !found {
		t.Errorf("the socket of local port %d (inodes %v) is not among this process's sockets", port, inodes)
	}
	if socketInodes(-1)["x"] {
		t.Error("a missing process has sockets")
	}
}

func TestArchivedAs(t *testing.T) {
	p := poisonRecord{ID: "pid-1", Topic: "orders.events", Partition: 1, Offset: 12}
	for _, tt := range []struct {
		row    string
		reason string
		match  bool
	}{
		{`{"topic":"orders.events","partition":1,"offset":12,"reason":"malformed","headers":[]}`, "malformed", true},
		{`{"topic":"orders.events","partition":1,"offset":120,"reason":"malformed","headers":[]}`, "malformed", false},
		{`{"topic":"orders.events","partition":11,"offset":12,"reason":"malformed"}`, "malformed", false},
		{`{"topic":"x","partition":0,"offset":0,"reason":"key_reused","headers":[{"key":"chaos_poison_id","value":"cGlkLTE="}]}`, "key_reused", true},
		{`not json`, "", false},
	} {
		reason, match := archivedAs(tt.row, p)
		if reason != tt.reason || match != tt.match {
			t.Errorf("archivedAs(%s) = %q, %v; want %q, %v", tt.row, reason, match, tt.reason, tt.match)
		}
	}
}

func TestCopyRecord(t *testing.T) {
	rec := &kgo.Record{Topic: "t", Partition: 3, Offset: 17, Key: []byte("k"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte("1")}}}
	cp := copyRecord(rec)
	if cp.Topic != "t" || cp.Partition != 3 || string(cp.Key) != "k" || string(cp.Value) != "v" ||
		header(cp, "ce_id") != "1" || header(cp, hdrDup) != "17" || len(rec.Headers) != 1 {
		t.Errorf("copy %+v of %+v", cp, rec)
	}
}

// TestRuleAllows checks the history check's reading of the transition table against
// rules of each shape in ordersvc's table.
func TestRuleAllows(t *testing.T) {
	for _, tt := range []struct {
		from ordersvc.State
		on   ordersvc.Trigger
		to   ordersvc.State
		want bool
	}{
		{ordersvc.Pending, ordersvc.OnStockReserved, ordersvc.Confirmed, true},
		{ordersvc.Pending, ordersvc.OnStockReserved, ordersvc.Pending, false},
		{ordersvc.Cancelling, ordersvc.OnPaymentRefunded, ordersvc.Cancelled, true},  // guard held
		{ordersvc.Cancelling, ordersvc.OnPaymentRefunded, ordersvc.Cancelling, true}, // guard did not hold
		{ordersvc.Cancelling, ordersvc.OnPaymentRefunded, ordersvc.Confirmed, false},
		{ordersvc.Cancelling, ordersvc.CmdCompensationTimeout, ordersvc.Cancelling, true},         // re-sent
		{ordersvc.Cancelling, ordersvc.CmdCompensationTimeout, ordersvc.CompensationFailed, true}, // out of re-sends
		{ordersvc.Cancelling, ordersvc.CmdCompensationTimeout, ordersvc.Cancelled, false},
	} {
		rule, ok := ordersvc.Lookup(tt.from, tt.on)
		if !ok {
			t.Fatalf("no rule for %s in %s", tt.on, tt.from)
		}
		if got := ruleAllows(rule, tt.from, tt.to); got != tt.want {
			t.Errorf("%s on %s -> %s: allowed %v, want %v", tt.from, tt.on, tt.to, got, tt.want)
		}
	}
}

// spaced injects its fault n×Scale times, each with the fault's duration, and stops
// pausing once the load is done (ctx ended).
func TestSpaced(t *testing.T) {
	for _, tt := range []struct {
		name  string
		n     int
		scale float64
		want  int
	}{
		{"as written", 2, 1, 2},
		{"scaled up", 2, 1.5, 3},
		{"at least once", 3, 0.1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []time.Duration
			faults := spaced(tt.n, 4, func(_ *run, _ context.Context, d time.Duration) { got = append(got, d) }, 7*time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the load is done: no pause
			faults(ctx, nil, Config{Orders: 10, Rate: 1, Scale: tt.scale})
			if len(got) != tt.want || slices.ContainsFunc(got, func(d time.Duration) bool { return d != 7*time.Second }) {
				t.Fatalf("faults %v, want %d of 7s", got, tt.want)
			}
		})
	}
}
