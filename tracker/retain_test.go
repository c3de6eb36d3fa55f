package tracker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

// Retention reads each table from where its last pass left it, batch after batch in time
// order (rows of one time split across batches all go): an event indexed late, with a
// time below that point, stays until the next full pass, the tenth after the first.
func TestRetainReadsFromItsFloor(t *testing.T) {
	ctx := context.Background()
	db := testenv.Postgres(t)
	table := testenv.Name(t, "retainfloor")
	var now time.Time
	tr := migratedTracker(t, db, table, tracker.WithNow(func() time.Time { return now }),
		tracker.WithRetention(time.Hour), tracker.WithRetentionBatch(2))
	next := int64(0)
	index := func(corr string, d time.Duration) {
		t.Helper()
		recs := records(t, "orders", at(d, chain(t, corr, [2]string{"order", "order.created"})))
		for _, r := range recs {
			r.Offset, next = next, next+1
		}
		if _, err := tr.Ingest(ctx, recs...); err != nil {
			t.Fatal(err)
		}
	}
	indexed := func(corr string) bool {
		t.Helper()
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE correlation_id = $1`, corr).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	retain := func(want int64) {
		t.Helper()
		if n, err := tr.Retain(ctx); err != nil || n != want {
			t.Fatalf("Retain at %v = %d, %v; want %d", now.Sub(t0), n, err, want)
		}
	}

	// Seven sagas a minute apart, and five more at minute 2 exactly.
	for i := range 7 {
		index(fmt.Sprintf("o-%d", i), time.Duration(i)*time.Minute)
	}
	for i := range 5 {
		index(fmt.Sprintf("tie-%d", i), 2*time.Minute)
	}
	// The first pass (a full one) deletes those before minute 3.5 (o-0 to o-3 and the five
	// at minute 2), in batches of 2.
	now = t0.Add(time.Hour + 3*time.Minute + 30*time.Second)
	retain(9)
	for _, corr := range []string{"o-0", "o-2", "o-3", "o-4", "tie-0", "tie-4"} {
		if indexed(corr) != (corr == "o-4") {
			t.Errorf("after the first pass, %s indexed: %v", corr, indexed(corr))
		}
	}

	// An event indexed late, at minute 1: the passes that read from minute 3.5 on leave it.
	index("late", time.Minute)
	now = now.Add(2 * time.Minute)
	retain(2) // o-4 and o-5
	for pass := 3; pass <= 10; pass++ {
		retain(0)
	}
	if !indexed("late") || !indexed("o-6") {
		t.Fatalf("after ten passes: late indexed %v, o-6 indexed %v; want both", indexed("late"), indexed("o-6"))
	}
	retain(1) // the eleventh pass, a full one
	if indexed("late") || !indexed("o-6") {
		t.Errorf("after the full pass: late indexed %v, o-6 indexed %v; want o-6 alone", indexed("late"), indexed("o-6"))
	}
}
