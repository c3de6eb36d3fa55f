package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/tracker"
)

// TestContractsObserved: a payment.authorized without its amount, observed by a tracker
// with the reference saga's contracts (track run's default), is reported by `sagactl
// contracts observed` with its source, type, version and each consumer it breaks
// (order and inventory).
func TestContractsObserved(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgresDSN(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cfg, err := loadTrackConfigs("../../deploy/tracker/order.json")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := withObservedContracts(nil, contractsReference)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracker.New(pool, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close() //nolint:errcheck
	if err := tracker.Migrate(ctx, pool, ""); err != nil {
		t.Fatal(err)
	}
	ev, err := event.New(events.SourcePayment, events.PaymentAuthorized, "o-bad", map[string]string{"order_id": "o-bad"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := event.ToRecord(events.TopicPayments, ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Ingest(ctx, r); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	std := stdio{out: &out, err: &errb, getenv: func(string) string { return "" }}
	if code := run(ctx, []string{"contracts", "observed", "-db", dsn, "-config", "../../deploy/tracker/order.json"}, std); code != exitOK {
		t.Fatalf("contracts observed: exit %d: %s", code, errb.String())
	}
	for _, consumer := range []string{"order", "inventory"} {
		found := false
		for line := range strings.SplitSeq(out.String(), "\n") {
			f := strings.Fields(line)
			found = found || (len(f) > 4 && f[0] == "payment" && f[1] == "payment.authorized" && f[2] == "1" && f[3] == consumer && f[4] == "accepts")
		}
		if !found {
			t.Errorf("contracts observed does not report %s:\n%s", consumer, out.String())
		}
	}
	if code := run(ctx, []string{"track", "-contracts", "nope.json", "-db", dsn, "-config", "../../deploy/tracker/order.json", "run"}, std); code != exitUsage {
		t.Errorf("track -contracts nope.json run: exit %d, want usage", code)
	}
}
