// Package freeport finds free loopback ports for the processes the tests, the chaos suite
// and the benchmarks start (a broker node takes two consecutive ports: its clients' and
// its controller's).
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
)

// Consecutive returns the first of n consecutive loopback ports that are free now, below
// the ephemeral range outgoing connections take. Another process may still take one before
// the caller binds it; callers start their servers at once.
func Consecutive(n int) (int, error) {
	for range 50 {
		first := 20000 + rand.IntN(12000)
		var lns []net.Listener
		for p := first; p < first+n; p++ {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == n {
			return first, nil
		}
	}
	return 0, fmt.Errorf("freeport: no %d consecutive free ports on 127.0.0.1", n)
}
