package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracker"
)

// TestContractsUsage: after payment moved from v1 to v2 of payment.authorized,
// `sagactl contracts usage` lists both versions with their producer, first and last
// seen and count in the window, and the consumers of the catalogue that still handle or
// accept v1; asked whether v1 can be retired it says no while v1 was published within
// the window, and yes, naming those consumers, with a window after the last v1.
func TestContractsUsage(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgresDSN(t)
	dir := t.TempDir()
	sagas, err := json.Marshal(tracker.Config{Topics: []string{"payments.events"}, Sagas: []tracker.Saga{
		{Name: "order", Start: []string{"order.created"}, Terminal: []string{"order.confirmed"}}}})
	if err != nil {
		t.Fatal(err)
	}
	catalogue := `{"declarations": [
		{"service": "payment", "role": "produces", "topic": "payments.events", "type": "payment.authorized", "version": 2},
		{"service": "order", "role": "consumes", "topic": "payments.events", "type": "payment.authorized", "version": 1},
		{"service": "order", "role": "consumes", "topic": "payments.events", "type": "payment.authorized", "version": 2},
		{"service": "inventory", "role": "consumes", "topic": "payments.events", "type": "payment.authorized", "version": 2},
		{"service": "inventory", "role": "accepts", "topic": "payments.events", "type": "payment.authorized", "version": 1}]}`
	for name, body := range map[string][]byte{"sagas.json": sagas, "catalogue.json": []byte(catalogue)} {
		if err := os.WriteFile(dir+"/"+name, body, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// Index v1 events until three hours ago and v2 events since.
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cfg, err := tracker.LoadConfig(dir + "/sagas.json")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracker.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tracker.Migrate(ctx, pool, ""); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	var recs []*kgo.Record
	for i, at := range []struct {
		version int
		ago     time.Duration
	}{{1, 5 * time.Hour}, {1, 3 * time.Hour}, {2, 2 * time.Hour}, {2, time.Minute}} {
		ev, err := event.New("payment", "payment.authorized", "o-1", map[string]int{"amount": 1})
		if err != nil {
			t.Fatal(err)
		}
		ev.SchemaVersion, ev.Time = at.version, now.Add(-at.ago)
		r, err := event.ToRecord("payments.events", ev)
		if err != nil {
			t.Fatal(err)
		}
		r.Offset = int64(i)
		recs = append(recs, r)
	}
	if _, err := tr.Ingest(ctx, recs...); err != nil {
		t.Fatal(err)
	}

	usage := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		env := map[string]string{"DATABASE_URL": dsn, "TRACKER_CONFIG": dir + "/sagas.json"}
		code := run(ctx, append([]string{"contracts", "usage", "-catalogue", dir + "/catalogue.json", "-retire", "payment.authorized@1"}, args...),
			stdio{out: &out, err: &errb, getenv: func(k string) string { return env[k] }})
		return code, out.String(), errb.String()
	}
	code, out, errs := usage("-window", "24h")
	if code != exitOK {
		t.Fatalf("contracts usage: exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "can v1 of payment.authorized be retired? no: ") || !strings.Contains(out, "payment published 2 in the last 24h (last at") {
		t.Errorf("with a 24h window:\n%s", out)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || !strings.Contains(lines[1], "payment.authorized") || !strings.Contains(lines[1], "order (handles), inventory (accepts, upcast)") ||
		!strings.Contains(lines[2], "payment.authorized") || !strings.Contains(lines[2], "order (handles), inventory (handles)") {
		t.Errorf("rows:\n%s", out)
	}

	code, out, errs = usage("-window", "1h", "-json")
	if code != exitOK {
		t.Fatalf("contracts usage -json: exit %d: %s", code, errs)
	}
	var rep usageReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(rep.Versions) != 2 || rep.Versions[0].Version != 1 || len(rep.Versions[0].Producers) != 1 ||
		rep.Versions[0].Producers[0].Count != 0 || rep.Versions[1].Producers[0].Count != 1 {
		t.Errorf("versions %+v", rep.Versions)
	}
	if a := rep.Answer; a == nil || !a.Retirable || !strings.HasPrefix(a.Reason, "yes: v1 of payment.authorized was last published at") ||
		!strings.Contains(a.Reason, "drop it from order (handles), inventory (accepts, upcast)") {
		t.Errorf("with a 1h window: %+v", rep.Answer)
	}
	if rep.Versions[1].Retire.Retirable {
		t.Errorf("v2 retirable: %+v", rep.Versions[1].Retire)
	}
}
