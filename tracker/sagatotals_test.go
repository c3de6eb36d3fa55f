package tracker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

// exactCounts is what Counts returns, computed by aggregating every summary: the kinds
// in the order of declared (zero when none), then the other kinds by name.
func exactCounts(t *testing.T, db *pgxpool.Pool, table string, now time.Time, declared ...string) []tracker.Count {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT saga,
		count(*) FILTER (WHERE ended IS NULL AND (deadline IS NULL OR deadline >= $1)),
		count(*) FILTER (WHERE ended IS NULL AND deadline < $1),
		count(*) FILTER (WHERE ended IS NOT NULL),
		min(started)
		FROM `+table+`_sagas GROUP BY saga ORDER BY saga`, now)
	if err != nil {
		t.Fatal(err)
	}
	var found []tracker.Count
	for rows.Next() {
		var c tracker.Count
		if err := rows.Scan(&c.Saga, &c.InFlight, &c.Stuck, &c.Completed, &c.Since); err != nil {
			t.Fatal(err)
		}
		c.Since = c.Since.UTC()
		found = append(found, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var out []tracker.Count
	for _, name := range declared {
		c := tracker.Count{Saga: name}
		if i := slices.IndexFunc(found, func(f tracker.Count) bool { return f.Saga == name }); i >= 0 {
			c = found[i]
			found = slices.Delete(found, i, i+1)
		}
		out = append(out, c)
	}
	return append(out, found...)
}

// sameCounts fails t unless tr's Counts are the exact ones and the totals table holds
// one positive row per kind with a summary, its count of them.
func sameCounts(t *testing.T, what string, tr *tracker.Tracker, db *pgxpool.Pool, table string, now time.Time, declared ...string) []tracker.Count {
	t.Helper()
	got, err := tr.Counts(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if want := exactCounts(t, db, table, now, declared...); !slices.Equal(got, want) {
		t.Errorf("%s: Counts = %+v\nthe summaries aggregated: %+v", what, got, want)
	}
	var off []string
	rows, err := db.Query(context.Background(), `SELECT coalesce(k.saga, s.saga) || ': ' || coalesce(k.total, 0) || ' counted, '
			|| coalesce(s.n, 0) || ' summaries'
		FROM `+table+`_saga_totals k FULL JOIN (SELECT saga, count(*) AS n FROM `+table+`_sagas GROUP BY saga) s
		ON s.saga = k.saga WHERE k.total IS DISTINCT FROM s.n`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		off = append(off, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(off) > 0 {
		t.Errorf("%s: saga totals off: %v", what, off)
	}
	return got
}

// at is evs moved by d.
func at(d time.Duration, evs []event.Event) []event.Event {
	out := slices.Clone(evs)
	for i := range out {
		out[i].Time = out[i].Time.Add(d)
	}
	return out
}

// The per-kind totals behind Counts stay the count of the summaries, and Counts the
// aggregate of every summary, through ingest, the upsert of a saga seen again (new
// events, a redelivery, two trackers racing on the same records), an index filled before
// the totals existed (Migrate counts it once), rebuilds (under a new declaration, and
// from truncated summaries) and retention (a kind it empties counts zero, a kind no
// longer declared is counted after the declared ones).
func TestSagaTotalsStayExact(t *testing.T) {
	ctx := context.Background()
	db := testenv.Postgres(t)
	table := testenv.Name(t, "sagatotals")
	now := t0.Add(2 * time.Minute)
	clock := func() time.Time { return now }
	tr := migratedTracker(t, db, table, tracker.WithNow(clock), tracker.WithRetention(time.Hour))
	const topic = "orders"
	next := int64(0)
	placed := func(evs ...event.Event) []*kgo.Record {
		recs := records(t, topic, evs)
		for _, r := range recs {
			r.Offset, next = next, next+1
		}
		return recs
	}
	ingest := func(tr *tracker.Tracker, recs []*kgo.Record) {
		t.Helper()
		if _, err := tr.Ingest(ctx, recs...); err != nil {
			t.Fatal(err)
		}
	}
	created, authorized := [2]string{"order", "order.created"}, [2]string{"payment", "payment.authorized"}
	reserved, confirmed := [2]string{"inventory", "stock.reserved"}, [2]string{"order", "order.confirmed"}

	// o-1 completes (and starts a shipping saga), o-2 and o-3 wait.
	first := placed(slices.Concat(chain(t, "o-1", created, authorized, reserved, confirmed),
		chain(t, "o-2", created), chain(t, "o-3", created, authorized))...)
	ingest(tr, first)
	c := sameCounts(t, "first batch", tr, db, table, now, "order", "shipping")
	if want := []tracker.Count{{Saga: "order", Stuck: 2, Completed: 1, Since: t0}, {Saga: "shipping", Stuck: 1, Since: t0.Add(3 * time.Second)}}; !slices.Equal(c, want) {
		t.Errorf("first batch: Counts = %+v, want %+v", c, want)
	}

	// Sagas seen again: new events of o-2 and o-3 (o-3 completes, starting a shipping
	// saga), a new saga beside them, then the first batch delivered again.
	o3 := chain(t, "o-3", created, authorized, reserved, confirmed)
	ingest(tr, placed(slices.Concat(at(time.Second, chain(t, "o-2", authorized)), o3[2:], chain(t, "o-4", created))...))
	sameCounts(t, "sagas seen again", tr, db, table, now, "order", "shipping")
	ingest(tr, first)
	sameCounts(t, "a redelivery", tr, db, table, now, "order", "shipping")

	// Two trackers index the same records at once, batch by batch: each saga is inserted
	// by one of them and updated by the other.
	var race []*kgo.Record
	for i := range 40 {
		race = append(race, placed(at(time.Duration(i)*time.Minute, chain(t, fmt.Sprintf("r-%02d", i), created, authorized, reserved, confirmed))...)...)
	}
	tr2 := migratedTracker(t, db, table, tracker.WithNow(clock), tracker.WithRetention(time.Hour))
	var wg sync.WaitGroup
	for _, tr := range []*tracker.Tracker{tr, tr2} {
		wg.Go(func() {
			for i := 0; i < len(race); i += 10 {
				if _, err := tr.Ingest(ctx, race[i:i+10]...); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	sameCounts(t, "two trackers racing", tr, db, table, now, "order", "shipping")

	// An index filled before the totals existed: Migrate counts its summaries once.
	if _, err := db.Exec(ctx, `DROP TABLE `+table+`_saga_totals; DROP FUNCTION `+table+`_saga_total() CASCADE`); err != nil {
		t.Fatal(err)
	}
	ingest(tr, placed(chain(t, "o-5", created, authorized)...))
	if err := tracker.Migrate(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, "migrated after the summaries", tr, db, table, now, "order", "shipping")
	if err := tracker.Migrate(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	ingest(tr, placed(chain(t, "o-6", created)...))
	sameCounts(t, "migrated again", tr, db, table, now, "order", "shipping")

	// A rebuild under a new kind of saga adds its summaries; one from truncated summaries
	// makes them all again.
	cfg := sagaConfig(topic)
	cfg.Sagas = append(cfg.Sagas, tracker.Saga{Name: "payment", Start: []string{"payment.authorized"}, Terminal: []string{"stock.*"}})
	wide, err := tracker.New(db, cfg, tracker.WithTable(table), tracker.WithNow(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = wide.Close() }()
	if err := wide.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	c = sameCounts(t, "rebuilt with a new kind", wide, db, table, now, "order", "shipping", "payment")
	if c[2].InFlight+c[2].Stuck+c[2].Completed == 0 {
		t.Errorf("rebuilt with a new kind: no payment saga in %+v", c)
	}
	if _, err := db.Exec(ctx, `TRUNCATE `+table+`_sagas`); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, "summaries truncated", wide, db, table, now, "order", "shipping", "payment")
	if err := wide.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, "rebuilt from nothing", wide, db, table, now, "order", "shipping", "payment")
	c = sameCounts(t, "a kind no longer declared", tr, db, table, now, "order", "shipping")
	if len(c) != 3 || c[2].Saga != "payment" {
		t.Errorf("a kind no longer declared: Counts = %+v, want payment after order and shipping", c)
	}

	// Retention deletes every saga but a recent order, in batches of 3 summaries: the
	// totals of shipping and payment go.
	now = t0.Add(5 * time.Hour)
	ingest(tr, placed(at(5*time.Hour-time.Minute, chain(t, "o-7", created))...))
	short := migratedTracker(t, db, table, tracker.WithNow(clock), tracker.WithRetention(time.Hour), tracker.WithRetentionBatch(3))
	if _, err := short.Retain(ctx); err != nil {
		t.Fatal(err)
	}
	c = sameCounts(t, "retained", tr, db, table, now, "order", "shipping")
	if want := []tracker.Count{{Saga: "order", Stuck: 1, Since: t0.Add(5*time.Hour - time.Minute)}, {Saga: "shipping"}}; !slices.Equal(c, want) {
		t.Errorf("retained: Counts = %+v, want %+v", c, want)
	}
}
