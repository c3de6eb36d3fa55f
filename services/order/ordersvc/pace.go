package ordersvc

import "time"

// paceFactor bounds the share of time a periodic query of the orders table may take:
// after a run that took d, the next starts at least paceFactor×d later, so the query
// keeps at most 1/(paceFactor+1) of one connection busy.
//
// The pending count, the stuck counts and the deadline sweep read the partial indexes of
// in-flight orders, and those hold an entry for every version of an order that was in
// flight which vacuum has not removed. A snapshot held elsewhere on the database (a long
// report, a stuck transaction) keeps every such version, so each run walks every order
// created since the snapshot was taken: 0.3 ms becomes 340 ms after ten minutes at
// 157 orders/s, and at a fixed period the three queries alone took more than a core of a
// two-core machine (docs/benchmarks.md, "held snapshot"). Paced, they slow down instead.
const paceFactor = 9

// paced returns how long to wait after a periodic query that took took: every, or
// paceFactor×took when that is longer.
func paced(every, took time.Duration) time.Duration {
	return max(every, paceFactor*took)
}
