// Package svctest is the test fixture that the payment and inventory services' tests
// share: running handlers in one transaction as the consumer's batch mode does, the
// order service's events they react to, reading a counter by attribute, and the check
// that a reconciliation corrects once.
//
// It is shared by the services' tests only, so it lives under services/; what any
// service built on app needs is in app/apptest.
package svctest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/services/events"
)

// InBatch runs h for evs in one transaction on db as the consumer's batch mode does
// (apptest.Batch). before, when not nil, runs after the handlers and before the
// commit-time writes (the deferred stock or balance changes), so a test can slip a
// concurrent transaction in between.
func InBatch(db migrate.Beginner, h consumer.TxHandler, before func(), evs ...event.Event) error {
	b := apptest.Batch{}
	if before != nil {
		b.Before = func(context.Context, pgx.Tx) { before() }
	}
	return b.Run(db, h, evs...)
}

// Outcome returns the order service's announcement of an order's outcome: typ is
// events.OrderConfirmed, events.OrderRejected or events.OrderCancelled.
func Outcome(t testing.TB, typ, order string) event.Event {
	return apptest.NewEvent(t, events.SourceOrder, typ, order, events.OrderOutcomeV1{OrderID: order, Reason: "test"})
}

// CancelRequested returns the order service's attempt-th request to cancel an order
// (reason "test").
func CancelRequested(t testing.TB, order string, attempt int) event.Event {
	return apptest.NewEvent(t, events.SourceOrder, events.OrderCancelRequested, order,
		events.OrderCancelRequestedV1{OrderID: order, Reason: "test", Attempt: attempt})
}

// Meter is a meter provider whose int64 counters a test can read.
type Meter struct {
	// Provider is what the handlers under test are given.
	Provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

// NewMeter returns a Meter that is read on demand.
func NewMeter() *Meter {
	reader := sdkmetric.NewManualReader()
	return &Meter{Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), reader: reader}
}

// Sum returns the int64 counter name as counted so far, summed by the value of the
// attribute attr (the reconciliations' "kind").
func (m *Meter) Sum(t testing.TB, name string, attr attribute.Key) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, metric := range sm.Metrics {
			if s, ok := metric.Data.(metricdata.Sum[int64]); ok && metric.Name == name {
				for _, dp := range s.DataPoints {
					v, _ := dp.Attributes.Value(attr)
					sums[v.AsString()] += dp.Value
				}
			}
		}
	}
	return sums
}

// ReconcileTwice runs a reconciliation round (a ReconcileOnce) twice and fails the test
// unless the first makes want corrections and the second none: each order is checked
// once.
func ReconcileTwice(t testing.TB, round func(context.Context) (int, error), want int) {
	t.Helper()
	ctx := context.Background()
	if n, err := round(ctx); err != nil || n != want {
		t.Fatalf("ReconcileOnce = %d, %v; want %d", n, err, want)
	}
	if n, err := round(ctx); err != nil || n != 0 {
		t.Fatalf("second ReconcileOnce = %d, %v; want 0 (each order checked once)", n, err)
	}
}

// CountingTx is a transaction that counts the round trips its user makes: each Exec,
// Query, QueryRow and SendBatch (a whole batch is one round trip). Give the handler under
// test the CountingTx itself (and create the transaction's hooks with it), not the
// transaction it wraps.
type CountingTx struct {
	pgx.Tx
	// RoundTrips is the number of calls so far.
	RoundTrips int
}

// Exec counts one round trip.
func (c *CountingTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.RoundTrips++
	return c.Tx.Exec(ctx, sql, args...)
}

// Query counts one round trip.
func (c *CountingTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.RoundTrips++
	return c.Tx.Query(ctx, sql, args...)
}

// QueryRow counts one round trip.
func (c *CountingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.RoundTrips++
	return c.Tx.QueryRow(ctx, sql, args...)
}

// SendBatch counts one round trip.
func (c *CountingTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	c.RoundTrips++
	return c.Tx.SendBatch(ctx, b)
}

// InCountedBatch is InBatch with the handlers given a CountingTx: it returns the round
// trips the handlers made before the commit-time writes ran.
func InCountedBatch(db migrate.Beginner, h consumer.TxHandler, evs ...event.Event) (int, error) {
	n := 0
	err := apptest.Batch{
		Wrap:   func(tx pgx.Tx) pgx.Tx { return &CountingTx{Tx: tx} },
		Before: func(_ context.Context, tx pgx.Tx) { n = tx.(*CountingTx).RoundTrips },
	}.Run(db, h, evs...)
	return n, err
}

// KillFirstCommit makes the first COMMIT of a transaction that inserted a row into
// table (and, if when is not empty, one for which the SQL condition when on NEW holds)
// lose its connection: a deferred constraint trigger terminates the committing backend,
// as a network fault at COMMIT would, and the transaction rolls back. Later commits pass.
// It returns a function that reports how many commits reached the trigger (the killed
// one included), read from a sequence that a rollback does not undo.
func KillFirstCommit(t testing.TB, db *pgxpool.Pool, table, when string) func() int64 {
	t.Helper()
	ctx := context.Background()
	name := table + "_kill_first_commit"
	cond := ""
	if when != "" {
		cond = "WHEN (" + when + ")"
	}
	if _, err := db.Exec(ctx, `CREATE SEQUENCE `+name+`;
CREATE FUNCTION `+name+`() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF nextval('`+name+`') = 1 THEN
		PERFORM pg_terminate_backend(pg_backend_pid());
		PERFORM pg_sleep(5); -- interrupted by the termination
	END IF;
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER `+name+` AFTER INSERT ON `+table+` DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW `+cond+` EXECUTE FUNCTION `+name+`()`); err != nil {
		t.Fatalf("svctest: kill first commit on %s: %v", table, err)
	}
	return func() int64 {
		t.Helper()
		var n int64
		var called bool
		if err := db.QueryRow(ctx, `SELECT last_value, is_called FROM `+name).Scan(&n, &called); err != nil {
			t.Fatalf("svctest: read %s: %v", name, err)
		}
		if !called {
			return 0
		}
		return n
	}
}

// PromValue returns the sum of the samples named name in a Prometheus text exposition
// (a /metrics body) whose labels include every label of labels.
func PromValue(body, name string, labels map[string]string) float64 {
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := line[len(name):]
		var lbls string
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.LastIndex(rest, "}")
			if end < 0 {
				continue
			}
			lbls, rest = rest[1:end], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // another metric whose name starts with name
		}
		ok := true
		for k, v := range labels {
			if !strings.Contains(","+lbls+",", ","+k+`="`+v+`",`) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// LogCount returns how many of the JSON log records have msg as their message and, for
// every key of attrs, that value.
func LogCount(records []map[string]any, msg string, attrs map[string]string) int {
	n := 0
	for _, r := range records {
		if r["msg"] != msg {
			continue
		}
		ok := true
		for k, v := range attrs {
			if s, _ := r[k].(string); s != v {
				ok = false
			}
		}
		if ok {
			n++
		}
	}
	return n
}
