package chaos

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/services/events"
)

// smoke is the bounded scenario `make test` runs: a few kill -9s (one of them the relay
// leader), one replay of orders.events from offset 0, and a handful of poison records,
// while 250 orders flow.
var smoke = Scenario{
	Name: "smoke",
	Doc:  "4 kill -9s (every 2nd the relay leader), orders.events replayed from offset 0, 9 poison records; 250 orders",
	Faults: func(ctx context.Context, r *run, c Config) {
		var wg sync.WaitGroup
		wg.Go(func() { r.killLoop(ctx, 4, 2*time.Second, time.Second, 2) })
		sleep(ctx, loadDuration(c)/2)
		r.replayTopic(ctx, events.TopicOrders)
		r.injectPoison(ctx, PoisonMalformed, PoisonUnknown, PoisonOversize, PoisonKeyReuse, PoisonHeaders)
		wg.Wait()
	},
}

// TestSmoke starts the whole system (devkafka, Redis, two instances of each service),
// runs the smoke scenario and checks every invariant.
func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	dir := t.TempDir()
	res := Run(ctx, smoke, Config{Orders: 250, Rate: 25, Seed: 42, Bound: 90 * time.Second,
		System: Options{Dir: dir, Log: &logs}})
	var out bytes.Buffer
	WriteText(&out, []Result{res})
	t.Log(out.String())
	if res.Err != "" {
		t.Fatalf("the smoke run could not be made: %s\n%s", res.Err, logs.String())
	}
	if res.Placed < 250 || res.Orders < 250 {
		t.Errorf("placed %d orders (%d in the order database), want 250", res.Placed, res.Orders)
	}
	if got := res.FaultCounts[FaultKill] + res.FaultCounts[FaultKillLeader]; got != 4 {
		t.Errorf("%d kills made, want 4: %+v", got, res.Faults)
	}
	if res.FaultCounts[FaultPoison] != 9 || len(res.Poison) != 9 {
		t.Errorf("%d poison faults, %d poison records produced, want 9", res.FaultCounts[FaultPoison], len(res.Poison))
	}
	for _, f := range res.Faults {
		if f.Err != "" {
			t.Errorf("fault %s on %s: %s", f.Kind, f.Target, f.Err)
		}
	}
	if !res.OK() {
		t.Errorf("%d anomalies (see above)", len(res.Anomalies))
	}
	if t.Failed() {
		for _, name := range []string{"order-1", "payment-1", "inventory-1"} {
			if b, err := os.ReadFile(dir + "/logs/" + name + ".log"); err == nil && len(b) > 0 {
				t.Logf("%s log (last 3000 bytes):\n%s", name, b[max(0, len(b)-3000):])
			}
		}
		t.Logf("harness log:\n%s", logs.String())
	}
}
