package deploy

import (
	"testing"
	"time"

	"github.com/choreo-saga/choreo/services/order/ordersvc"
	"github.com/choreo-saga/choreo/tracker"
)

// TestOneDefinitionOfStuck: the tracker's declaration of the order saga gives every step
// the window after which the order service flags an order stuck, so the console's
// overview, sagactl order and sagactl track stuck agree on which orders are stuck.
func TestOneDefinitionOfStuck(t *testing.T) {
	cfg, err := tracker.LoadConfig("tracker/order.json")
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for _, s := range cfg.Sagas {
		for _, st := range s.Steps {
			steps++
			if got := time.Duration(st.Within); got != ordersvc.DefaultStuckAfter {
				t.Errorf("saga %s step %q: within %s, want ordersvc.DefaultStuckAfter (%s)", s.Name, st.Name, got, ordersvc.DefaultStuckAfter)
			}
		}
	}
	if steps == 0 {
		t.Fatal("tracker/order.json declares no steps")
	}
}
