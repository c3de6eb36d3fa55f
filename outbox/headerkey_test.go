package outbox

import "testing"

// The names every row carries are interned: decoding them allocates nothing.
func TestHeaderKeyInterned(t *testing.T) {
	k := []byte("traceparent")
	if n := testing.AllocsPerRun(100, func() { _ = headerKey(k) }); n != 0 {
		t.Fatalf("%v allocs", n)
	}
	if headerKey([]byte("x-custom")) != "x-custom" {
		t.Fatal("unknown key")
	}
}
