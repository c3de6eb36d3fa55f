package benchutil

import (
	"context"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/internal/testenv"
)

// Under -R the logged time counts from each transaction's scheduled start; Latencies
// must be the transactions' own times. Scheduled every ~1 ms, 20 ms transactions fall
// ever further behind, so lag-inclusive times would add up to far more than the run.
func TestPgbenchRateLatenciesExcludeScheduleLag(t *testing.T) {
	needPgbench(t)
	dsn := testenv.PostgresDSN(t)
	start := time.Now()
	r, err := Pgbench{DSN: dsn, Script: "SELECT pg_sleep(0.02);\n", Clients: 1, Transactions: 8,
		Rate: 1000, Latencies: true}.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	if len(r.Latencies) != 8 {
		t.Fatalf("%d latencies, want 8", len(r.Latencies))
	}
	var sum time.Duration
	for _, l := range r.Latencies {
		if l < 20*time.Millisecond {
			t.Errorf("latency %v is shorter than the transaction's pg_sleep", l)
		}
		sum += l
	}
	if sum > elapsed {
		t.Errorf("latencies add up to %v in a %v run of one client: they include the schedule lag", sum, elapsed)
	}
}
