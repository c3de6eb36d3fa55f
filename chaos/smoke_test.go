package chaos

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/internal/testenv/faultproxy"
	"github.com/choreo-saga/choreo/services/events"
)

// The smoke runs share the binaries, built once.
var (
	binsOnce sync.Once
	binsDir  string
	bins     string
	binsErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binsDir != "" {
		os.RemoveAll(binsDir)
	}
	os.Exit(code)
}

// builtBins returns the directory of the suite's binaries, building them at the first call.
func builtBins(t *testing.T) string {
	t.Helper()
	binsOnce.Do(func() {
		if binsDir, binsErr = os.MkdirTemp("", "choreo-chaos-test-"); binsErr == nil {
			bins, binsErr = Build(context.Background(), binsDir)
		}
	})
	if binsErr != nil {
		t.Fatal(binsErr)
	}
	return bins
}

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
	res := runSmoke(t, smoke, 4*time.Minute, Config{Orders: 250, Rate: 25, Seed: 42, Bound: 90 * time.Second})
	checkPlaced(t, res, 250)
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
}

// runSmoke runs sc within bound (the build not counted) on a system in a test directory
// and logs the result; when the test fails, the end of each first instance's log and the
// harness's log follow.
func runSmoke(t *testing.T, sc Scenario, bound time.Duration, c Config) Result {
	t.Helper()
	bins := builtBins(t)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	var logs bytes.Buffer
	dir := t.TempDir()
	c.System.Dir, c.System.Log, c.System.Bins = dir, &logs, bins
	res := Run(ctx, sc, c)
	var out bytes.Buffer
	WriteText(&out, []Result{res})
	t.Log(out.String())
	if res.Err != "" {
		t.Fatalf("the %s run could not be made: %s\n%s", sc.Name, res.Err, logs.String())
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, name := range []string{"order-1", "payment-1", "inventory-1"} {
			if b, err := os.ReadFile(dir + "/logs/" + name + ".log"); err == nil && len(b) > 0 {
				t.Logf("%s log (last 3000 bytes):\n%s", name, b[max(0, len(b)-3000):])
			}
		}
		t.Logf("harness log:\n%s", logs.String())
	})
	return res
}

// smokeNetwork is the bounded network scenario `make test` runs: one instance of each
// service, the payment service cut off from its Postgres and Redis by the fault proxy
// for 2 s, then every one of those connections reset, while 40 orders flow.
var smokeNetwork = Scenario{
	Name:    "smoke-network",
	Doc:     "payment ↔ postgres, redis: a 2 s partition, then every connection reset; 40 orders",
	Network: PathPaymentStores,
	Faults: func(ctx context.Context, r *run, c Config) {
		sleep(ctx, time.Second)
		r.netFault(ctx, PathPaymentStores, "partition", faultproxy.Faults{Down: true}, 2*time.Second)
		r.netReset(ctx, PathPaymentStores)
	},
}

// TestSmokeNetwork runs the bounded network scenario and checks every invariant: every
// order terminal, charges = confirmed orders, stock conserved, outboxes drained and no
// dead letter.
func TestSmokeNetwork(t *testing.T) {
	res := runSmoke(t, smokeNetwork, 3*time.Minute, Config{Orders: 40, Rate: 10, Seed: 7, Bound: 60 * time.Second,
		System: Options{Instances: 1}})
	checkPlaced(t, res, 40)
	want := []string{"partition for 2s", "every connection reset"}
	if len(res.Faults) != len(want) {
		t.Errorf("faults %+v, want %v", res.Faults, want)
	}
	for i, f := range res.Faults {
		if f.Err != "" || f.Kind != FaultNetwork || i >= len(want) || f.Detail != want[i] {
			t.Errorf("fault %d: %+v, want the network faults %q", i, f, want)
		}
	}
	if res.DeadLetters != 0 {
		t.Errorf("%d dead letters, want 0", res.DeadLetters)
	}
	if !res.OK() {
		t.Errorf("%d anomalies (see above)", len(res.Anomalies))
	}
}

// checkPlaced asserts that every one of want orders was accounted for: placed, or shed
// with a 503 by the order API's admission control (which a loaded machine makes it do;
// shedding is its designed answer to overload, and the client is told), none failed to
// place, at least half were placed, and the order database holds every placed order.
func checkPlaced(t *testing.T, res Result, want int) {
	t.Helper()
	shed := 0
	if res.Load != nil {
		shed = res.Load.Shed
	}
	if res.Placed+shed < want || res.FailedToPlace != 0 || res.Placed < want/2 || res.Orders < res.Placed {
		t.Errorf("placed %d orders, shed %d, failed to place %d, %d in the order database; want %d placed or shed, none failed, the database holding each placed one",
			res.Placed, shed, res.FailedToPlace, res.Orders, want)
	}
}
