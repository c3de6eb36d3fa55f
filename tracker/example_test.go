package tracker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/tracker"
)

// exampleDSN is the Postgres the runnable example uses.
func exampleDSN() string {
	if dsn := os.Getenv("CHOREO_TEST_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/postgres"
}

// Example declares the order saga's payment step, indexes two events of a saga (as Run
// does with the records it reads) and asks which sagas are stuck a minute later.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleDSN())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	schema := "tracker_example_" + hex.EncodeToString(b)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		log.Fatal(err)
	}
	defer pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE") //nolint:errcheck

	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cfg := tracker.Config{
		Topics: []string{"orders.events"},
		Sagas: []tracker.Saga{{
			Name:     "order",
			Start:    []string{"order.created"},
			Terminal: []string{"order.confirmed", "order.rejected"},
			Steps: []tracker.Step{
				{After: "payment.authorized", Expect: []string{"stock.*"}, Within: tracker.Duration(30 * time.Second), Service: "inventory"},
			},
		}},
	}
	tr, err := tracker.New(pool, cfg, tracker.WithTable(schema+".events"),
		tracker.WithNow(func() time.Time { return start.Add(time.Minute) }))
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close() //nolint:errcheck
	if err := tracker.Migrate(ctx, pool, schema+".events"); err != nil {
		log.Fatal(err)
	}

	created, _ := event.New("order", "order.created", "o-1", nil)
	created.Time = start
	paid, _ := event.New("payment", "payment.authorized", "o-1", nil)
	paid = paid.CausedBy(created)
	paid.Time = start.Add(time.Second)
	var recs []*kgo.Record
	for i, e := range []event.Event{created, paid} {
		r, err := event.ToRecord("orders.events", e)
		if err != nil {
			log.Fatal(err)
		}
		r.Offset = int64(i)
		recs = append(recs, r)
	}
	if _, err := tr.Ingest(ctx, recs...); err != nil {
		log.Fatal(err)
	}

	stuck, err := tr.Stuck(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range stuck {
		fmt.Printf("%s %s: waiting for %s to answer %s with %v\n",
			s.Saga, s.CorrelationID, s.Waiting.Service, s.Waiting.After.Type, s.Waiting.Expected)
	}
	// Output:
	// order o-1: waiting for inventory to answer payment.authorized with [stock.*]
}
