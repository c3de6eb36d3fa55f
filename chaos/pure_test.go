package chaos

import (
	"net"
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
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

func TestArchivedReason(t *testing.T) {
	for _, tt := range []struct{ row, want, got string }{
		{`{"reason": "malformed", "topic": "orders.events"}`, "malformed", "malformed"},
		{`{"reason": "retries_exhausted"}`, "malformed", "retries_exhausted"},
		{`{"topic": "orders.events"}`, "key_reused", "(no reason recorded)"},
	} {
		if got := archivedReason(tt.row, tt.want); got != tt.got {
			t.Errorf("archivedReason(%s, %s) = %q, want %q", tt.row, tt.want, got, tt.got)
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
