package tracker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

// TestUsageAndRetirement: the index records, per (type, schema version), who published
// it, when first and last, and how many within a window, kept past the retention of
// the events and rebuilt from the index. Retire answers whether v1 of
// payment.authorized can go: not while payment still publishes it, nor while a dead
// letter of it is left, nor while a consumer handles nothing later; yes once v1 is no
// longer published and the consumers handle v2, naming those that still accept v1.
func TestUsageAndRetirement(t *testing.T) {
	ctx := context.Background()
	db := testenv.Postgres(t)
	now := t0.Add(48 * time.Hour)
	tr, err := tracker.New(db, sagaConfig("payments.events"), tracker.WithNow(func() time.Time { return now }),
		tracker.WithRetention(30*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := tracker.Migrate(ctx, db, ""); err != nil {
		t.Fatal(err)
	}
	offset := int64(0)
	rec := func(topic, source string, version int, at time.Time, dead bool) *kgo.Record {
		ev, err := event.New(source, "payment.authorized", "o-1", map[string]int{"amount": 1})
		if err != nil {
			t.Fatal(err)
		}
		ev.SchemaVersion, ev.Time = version, at
		r, err := event.ToRecord(topic, ev)
		if err != nil {
			t.Fatal(err)
		}
		if dead {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: consumer.HeaderDLQReason, Value: []byte(consumer.ReasonUnsupported)})
		}
		offset++
		r.Offset = offset
		return r
	}
	// v1 by payment until an hour ago, v2 by payment since a day ago.
	var recs []*kgo.Record
	for i := range 5 {
		recs = append(recs, rec("payments.events", "payment", 1, now.Add(-30*time.Hour+time.Duration(i)*7*time.Hour), false))
	}
	recs = append(recs, rec("payments.events", "payment", 2, now.Add(-24*time.Hour), false),
		rec("payments.events", "payment", 2, now.Add(-time.Minute), false))
	if _, err := tr.Ingest(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	usage, err := tr.Usage(ctx, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(usage) != 2 || usage[0].Version != 1 || usage[1].Version != 2 {
		t.Fatalf("usage %+v; want v1 and v2 of payment.authorized", usage)
	}
	p1 := usage[0].Producers
	if len(p1) != 1 || p1[0].Source != "payment" || !p1[0].FirstSeen.Equal(now.Add(-30*time.Hour)) ||
		!p1[0].LastSeen.Equal(now.Add(-2*time.Hour)) || p1[0].Count != 1 {
		t.Errorf("v1 producers %+v; want payment, first 30h ago, last 2h ago, 1 in the last 2h", p1)
	}
	if p2 := usage[1].Producers; len(p2) != 1 || p2[0].Count != 1 {
		t.Errorf("v2 producers %+v; want payment, 1 in the last 2h", p2)
	}

	declared := []tracker.Declared{
		{Service: "payment", Type: "payment.authorized", Produces: []int{2}},
		{Service: "order", Type: "payment.authorized", Handles: []int{1, 2}},
		{Service: "inventory", Type: "payment.authorized", Handles: []int{2}, Accepts: []int{1}},
	}
	r := tracker.Retire(usage, declared, "payment.authorized", 1, now, 2*time.Hour)
	if r.Retirable || !strings.Contains(r.Reason, "payment published 1 in the last 2h (last at") {
		t.Errorf("while payment publishes v1: %+v", r)
	}

	// An hour later, nothing published v1 within the window: retirable, and the
	// services that still handle or accept it are named.
	now = now.Add(time.Hour)
	if usage, err = tr.Usage(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	r = tracker.Retire(usage, declared, "payment.authorized", 1, now, time.Hour)
	if !r.Retirable || !strings.HasPrefix(r.Reason, "yes:") || len(r.Consumers) != 2 ||
		r.Consumers[0] != "order (handles)" || r.Consumers[1] != "inventory (accepts, upcast)" {
		t.Errorf("after v1 stopped: %+v", r)
	}
	// A consumer that handles v1 only, a producer that still declares it, or a dead
	// letter of it keeps it.
	for name, d := range map[string][]tracker.Declared{
		"v1-only consumer":  append(declared, tracker.Declared{Service: "legacy", Type: "payment.authorized", Handles: []int{1}}),
		"declared producer": append(declared, tracker.Declared{Service: "refunds", Type: "payment.authorized", Produces: []int{1}}),
	} {
		if r := tracker.Retire(usage, d, "payment.authorized", 1, now, time.Hour); r.Retirable {
			t.Errorf("%s: %+v; want not retirable", name, r)
		}
	}
	// Kept by a declaration only, the answer still says v1 stopped and who reads it.
	if r := tracker.Retire(usage, append(declared, tracker.Declared{Service: "payment", Type: "payment.authorized", Produces: []int{1}}),
		"payment.authorized", 1, now, time.Hour); !strings.HasPrefix(r.Reason, "no: payment still declares producing it; none was published in the last 1h (the last at ") ||
		!strings.HasSuffix(r.Reason, "; still read by order (handles), inventory (accepts, upcast)") {
		t.Errorf("declared only: %q", r.Reason)
	}
	if _, err := tr.Ingest(ctx, rec("payments.events.dlq", "payment", 1, now.Add(-5*time.Hour), true)); err != nil {
		t.Fatal(err)
	}
	if usage, err = tr.Usage(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if r := tracker.Retire(usage, declared, "payment.authorized", 1, now, time.Hour); r.Retirable ||
		!strings.Contains(r.Reason, "1 dead letter(s)") {
		t.Errorf("with a v1 dead letter: %+v", r)
	}

	// First and last seen outlive the events' retention, and Rebuild keeps them.
	if _, err := db.Exec(ctx, `DELETE FROM `+tracker.DefaultTable); err != nil {
		t.Fatal(err)
	}
	if err := tr.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if usage, err = tr.Usage(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if len(usage) != 2 || len(usage[0].Producers) != 1 || !usage[0].Producers[0].LastSeen.Equal(now.Add(-3*time.Hour)) ||
		usage[0].Producers[0].Count != 0 {
		t.Errorf("after retention: %+v", usage)
	}
}
