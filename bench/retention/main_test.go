package main

import (
	"context"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/internal/testenv"
)

// Both designs replay a short churn: each reaches its window with every record of it, ends
// holding one window of records (the delete design having deleted, the partition design
// having dropped the rest), and takes claims; a claim of a key a partition already holds
// inserts nothing.
func TestMeasureBothDesigns(t *testing.T) {
	ctx := context.Background()
	c := config{pg: testenv.PostgresDSN(t), window: 20, windows: 3, claims: 200 * time.Millisecond, writers: 2}
	const rate = 50
	for _, d := range designs() {
		t.Run(d.name, func(t *testing.T) {
			r, err := measure(ctx, c, d, rate)
			if err != nil {
				t.Fatal(err)
			}
			if r.AtWindow.Rows != rate*int64(c.window) {
				t.Errorf("rows at the window = %d, want %d", r.AtWindow.Rows, rate*c.window)
			}
			// At the end the last clean-up (at second 59) has left the records expiring
			// after it (the delete design) or in its second (the partitions), and second
			// 59's were inserted: the records of seconds 40 to 59, and of 39 all or all
			// but the one expiring at 59.000.
			if lo, hi := int64(rate*c.window), int64(rate*(c.window+1)); r.End.Rows < lo || r.End.Rows > hi {
				t.Errorf("rows at the end = %d, want %d to %d", r.End.Rows, lo, hi)
			}
			if r.AtWindow.total() <= 0 || r.Ratio <= 0 || r.MaxRatio <= 0 || r.ClaimsPerSec <= 0 {
				t.Errorf("figures missing: %+v", r)
			}
		})
	}
}

func TestPartitionClaimRefusesAHeldKey(t *testing.T) {
	ctx := context.Background()
	pool := testenv.PostgresNamed(t, "retention")
	d := designs()[1]
	c := config{window: 20}
	if err := d.setup(ctx, pool, c); err != nil {
		t.Fatal(err)
	}
	if err := d.before(ctx, pool, c, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, insertSQL, 0, 10, c.window); err != nil {
		t.Fatal(err)
	}
	var scope, key string
	if err := pool.QueryRow(ctx, "SELECT scope, key FROM choreo_idempotency LIMIT 1").Scan(&scope, &key); err != nil {
		t.Fatal(err)
	}
	if err := d.beforeClaims(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := d.claim(ctx, pool, scope, key); err != nil {
		t.Fatal(err)
	}
	if err := d.claim(ctx, pool, scope, key+"-new"); err != nil {
		t.Fatal(err)
	}
	var held, fresh int
	if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE key = $1), count(*) FILTER (WHERE key = $1 || '-new') FROM choreo_idempotency", key).Scan(&held, &fresh); err != nil {
		t.Fatal(err)
	}
	if held != 1 || fresh != 1 {
		t.Errorf("records of the held key = %d, of the new key = %d; want 1 and 1", held, fresh)
	}
}
