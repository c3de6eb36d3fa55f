package main

import (
	"testing"

	"github.com/choreo-saga/choreo/bench/internal/orderwatch"
)

func TestTallyLooksUpOnlyOpenOrders(t *testing.T) {
	ended := map[string]orderwatch.Terminal{}
	looked := map[string]int{}
	lookup := func(id string) (orderwatch.Terminal, bool) {
		looked[id]++
		e, ok := ended[id]
		return e, ok
	}
	var c tally
	a, b, x := &order{id: "a"}, &order{id: "b"}, &order{id: "x"}
	ended["a"] = orderwatch.Terminal{Outcome: orderwatch.Confirmed}
	c.update([]*order{a, b, x}, lookup)
	if c.offered != 3 || c.confirmed != 1 || len(c.open) != 2 {
		t.Fatalf("after the first sample: offered %d confirmed %d open %d, want 3 1 2", c.offered, c.confirmed, len(c.open))
	}
	ended["b"] = orderwatch.Terminal{Outcome: orderwatch.Confirmed}
	ended["x"] = orderwatch.Terminal{Outcome: orderwatch.Cancelled}
	d := &order{id: "d"}
	c.update([]*order{d}, lookup)
	if c.offered != 4 || c.confirmed != 2 || len(c.open) != 1 || c.open[0] != d {
		t.Fatalf("after the second sample: offered %d confirmed %d open %v, want 4 2 [d]", c.offered, c.confirmed, c.open)
	}
	c.update(nil, lookup)
	if looked["a"] != 1 || looked["b"] != 2 || looked["x"] != 2 || looked["d"] != 2 {
		t.Fatalf("lookups %v: a settled order was looked up again, or an open one was not", looked)
	}
}
