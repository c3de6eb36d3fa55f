package tracker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

// Run rebuilds the summaries at start only when they were built for other declarations
// or never: with the declarations unchanged it indexes without rebuilding, with a step's
// window changed it rebuilds first.
func TestRunRebuildsOnlyWhenDeclarationsChange(t *testing.T) {
	ctx := context.Background()
	db := testenv.Postgres(t)
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	table := testenv.Name(t, "rebuildmark")
	if err := tracker.Migrate(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	cfg := sagaConfig(topic)
	tr, err := tracker.New(db, cfg, tracker.WithTable(table), tracker.WithGroup(testenv.Name(t, "g1")), tracker.WithRetention(100*365*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close() }()
	if needed, err := tr.RebuildNeeded(ctx); err != nil || !needed {
		t.Fatalf("RebuildNeeded on a new index = %v, %v; want true", needed, err)
	}
	off := int64(1_000_000) // past the positions the records produced below take
	ingestAt(t, tr, topic, &off, chain(t, "o-kept", [2]string{"order", "order.created"})...)
	if err := tr.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if needed, err := tr.RebuildNeeded(ctx); err != nil || needed {
		t.Fatalf("RebuildNeeded after Rebuild = %v, %v; want false", needed, err)
	}
	// A summary only a rebuild would put right.
	tamper := func() {
		t.Helper()
		if _, err := db.Exec(ctx, `UPDATE `+table+`_sagas SET events = 99 WHERE correlation_id = 'o-kept'`); err != nil {
			t.Fatal(err)
		}
	}
	tamper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// runUntilIndexed runs tr until it has indexed corr's order.created, then stops it.
	runUntilIndexed := func(tr *tracker.Tracker, corr string) {
		t.Helper()
		if err := cl.ProduceSync(ctx, records(t, topic, chain(t, corr, [2]string{"order", "order.created"}))...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- tr.Run(rctx, brokers) }()
		testenv.Eventually(t, testenv.Timeout, corr+" indexed", func() bool {
			_, err := tr.Saga(ctx, corr)
			return err == nil
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	runUntilIndexed(tr, "o-1")
	if got := sagaEvents(t, db, table, "o-kept"); got != 99 {
		t.Errorf("the declarations unchanged, Run rebuilt the summaries (o-kept has %d events, not the tampered 99)", got)
	}

	changed := sagaConfig(topic)
	changed.Sagas[0].Steps[0].Within = tracker.Duration(time.Minute)
	tr2, err := tracker.New(db, changed, tracker.WithTable(table), tracker.WithGroup(testenv.Name(t, "g2")), tracker.WithRetention(100*365*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr2.Close() }()
	if needed, err := tr2.RebuildNeeded(ctx); err != nil || !needed {
		t.Fatalf("RebuildNeeded with a step's window changed = %v, %v; want true", needed, err)
	}
	runUntilIndexed(tr2, "o-2")
	if got := sagaEvents(t, db, table, "o-kept"); got != 1 {
		t.Errorf("the declarations changed, Run did not rebuild the summaries (o-kept has %d events, want 1)", got)
	}
	if needed, err := tr2.RebuildNeeded(ctx); err != nil || needed {
		t.Errorf("RebuildNeeded after Run's rebuild = %v, %v; want false", needed, err)
	}
	if needed, err := tr.RebuildNeeded(ctx); err != nil || !needed {
		t.Errorf("RebuildNeeded under the former declarations = %v, %v; want true", needed, err)
	}
}

// sagaEvents is the event count of corr's order saga summary.
func sagaEvents(t *testing.T, db *pgxpool.Pool, table, corr string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT events FROM `+table+`_sagas WHERE correlation_id = $1 AND saga = 'order'`, corr).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
