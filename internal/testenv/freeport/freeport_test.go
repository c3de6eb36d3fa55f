package freeport

import (
	"net"
	"strconv"
	"testing"
)

// The ports Consecutive returns can be bound, all of them.
func TestConsecutive(t *testing.T) {
	first, err := Consecutive(4)
	if err != nil {
		t.Fatal(err)
	}
	for p := first; p < first+4; p++ {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d of %d..%d: %v", p, first, first+3, err)
		}
		ln.Close()
	}
}
