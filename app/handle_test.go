package app_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
)

// widget is the payload of the tests' events.
type widget struct {
	ID string `json:"id,omitempty"`
}

// Producers of the tests' events.
var (
	pongEvent    = app.Producer[widget]{Source: "widget", Topic: "widgets.out", Type: "widget.pong", Version: 1}
	auditedEvent = app.Producer[widget]{Source: "widget", Topic: "widgets.out", Type: "widget.audited", Version: 1}
)

// The front door: On per topic, event type and version, Publish through the outbox in
// the handler's transaction, topics and their .dlq created by Run. A type registered on
// one topic is ignored on another, and an unregistered type is ignored; LockOn locks
// the entity it names; Publish refuses an event Produces did not declare. An event
// published in a handler continues the handled event's saga: its causation id is the
// handled event's id and its correlation id the handled event's, unless the handler set
// them.
func TestHandleAndPublish(t *testing.T) {
	ctx := context.Background()
	a := newTestApp(t, app.WithGroup("widget-kit"),
		app.WithSchema("widget", `CREATE TABLE IF NOT EXISTS pings (id text PRIMARY KEY, locked text NOT NULL)`))
	a.Produces(pongEvent, auditedEvent)
	var undeclared error
	app.On(a.App, "widgets.in", "widget.ping", 1, func(ctx context.Context, tx pgx.Tx, ev event.Event, _ widget) error {
		if _, err := tx.Exec(ctx, `INSERT INTO pings (id, locked) VALUES ($1, $2)`, ev.Subject, "owner-"+ev.Subject); err != nil {
			return err
		}
		out, err := pongEvent.New(ev.Subject, widget{ID: ev.Subject})
		if err != nil {
			return err
		}
		undeclared = a.Publish(ctx, tx, "widgets.elsewhere", out)
		own, err := auditedEvent.New("audit-"+ev.Subject, widget{})
		if err != nil {
			return err
		}
		own.CorrelationID, own.CausationID = "audit", "audit-cause"
		if err := a.Publish(ctx, tx, "widgets.out", own); err != nil {
			return err
		}
		return a.Publish(ctx, tx, "widgets.out", out)
	}, app.LockOn(func(_ context.Context, ev event.Event) (string, error) { return "owner-" + ev.Subject, nil }))
	app.On(a.App, "widgets.other", "widget.other", 1, func(context.Context, pgx.Tx, event.Event, widget) error { return nil })

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	apptest.WaitReady(t, a.base)
	k := apptest.NewKafka(t, a.brokers)
	topics, err := kadm.NewClient(k.Client()).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"widgets.in", "widgets.in.dlq", "widgets.other", "widgets.other.dlq", "widgets.out"} {
		if !topics.Has(want) {
			t.Errorf("topic %s not created at start (have %v)", want, topics.Names())
		}
	}

	ping := apptest.NewEvent(t, "test", "widget.ping", "w-1", map[string]string{})
	ping.CorrelationID = "saga-w"
	k.ProduceTwice("widgets.in", ping)
	k.Produce("widgets.in", apptest.NewEvent(t, "test", "widget.unheard", "w-2", map[string]string{}))
	k.Produce("widgets.other", apptest.NewEvent(t, "test", "widget.ping", "w-3", map[string]string{}))
	k.WaitSettled(a.Pool, "", map[string][]string{"widget-kit": {"widgets.in", "widgets.other"}})

	got := k.Events("widgets.out")
	if len(got) != 2 || len(got["w-1"]) != 1 || len(got["audit-w-1"]) != 1 {
		t.Fatalf("published %v, want one widget.pong and one widget.audited", got)
	}
	if pong := got["w-1"][0]; pong.CausationID != ping.ID || pong.CorrelationID != "saga-w" {
		t.Errorf("widget.pong caused by %q in saga %q, want %q in saga-w", pong.CausationID, pong.CorrelationID, ping.ID)
	}
	if own := got["audit-w-1"][0]; own.CausationID != "audit-cause" || own.CorrelationID != "audit" {
		t.Errorf("widget.audited caused by %q in saga %q: the ids the handler set were changed", own.CausationID, own.CorrelationID)
	}
	if !errors.Is(undeclared, app.ErrUndeclared) {
		t.Errorf("Publish to an undeclared topic = %v, want ErrUndeclared", undeclared)
	}
	var n int
	if err := a.Pool.QueryRow(ctx, `SELECT count(*) FROM pings`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d pings handled (%v), want 1: the duplicate skipped, w-3 on the wrong topic ignored", n, err)
	}
	if dead := k.ReadAll("widgets.in.dlq"); len(dead) != 0 {
		t.Errorf("%d dead letters; an unregistered type is ignored by default", len(dead))
	}
	// LockOn: the lease was taken on the entity the option names (its fencing token
	// was checked under that name in the transaction).
	var fenced int
	if err := a.Pool.QueryRow(ctx, `SELECT count(*) FROM choreo_lock_fences WHERE entity LIKE '%{owner-w-1}'`).Scan(&fenced); err != nil || fenced != 1 {
		t.Errorf("fence rows for owner-w-1: %d (%v), want 1", fenced, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// With WithDeadLetterUnknownTypes an event type nobody registered is dead-lettered with
// reason unknown_type.
func TestHandleDeadLetterUnknownTypes(t *testing.T) {
	ctx := context.Background()
	a := newTestApp(t, app.WithDeadLetterUnknownTypes())
	app.On(a.App, "widgets.in", "widget.ping", 1, func(context.Context, pgx.Tx, event.Event, widget) error { return nil })
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	apptest.WaitReady(t, a.base)
	k := apptest.NewKafka(t, a.brokers)
	k.Produce("widgets.in", apptest.NewEvent(t, "test", "widget.unheard", "w-2", map[string]string{}))
	apptest.WaitFor(t, "a dead letter", func() bool { return len(k.ReadAll("widgets.in.dlq")) == 1 })
	if r := k.ReadAll("widgets.in.dlq")[0]; header(r, consumer.HeaderDLQReason) != consumer.ReasonUnknownType {
		t.Errorf("reason %q", header(r, consumer.HeaderDLQReason))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// On panics on a (type, version) registered twice and on misuse, as http.ServeMux does.
func TestHandleProgrammingErrors(t *testing.T) {
	a := newTestApp(t)
	h := func(context.Context, pgx.Tx, event.Event, widget) error { return nil }
	app.On(a.App, "a", "t", 1, h)
	app.On(a.App, "a", "t", 2, h)
	for name, f := range map[string]func(){
		"twice":       func() { app.On(a.App, "a", "t", 1, h) },
		"other topic": func() { app.On(a.App, "b", "t", 3, h) },
		"empty type":  func() { app.On(a.App, "a", "", 1, h) },
		"version 0":   func() { app.On(a.App, "a", "u", 0, h) },
		"nil handler": func() { app.On[widget](a.App, "a", "u", 1, nil) },
		"empty topic": func() { app.On(a.App, "", "u", 1, h) },
		"not a struct": func() {
			app.On(a.App, "a", "u", 1, func(context.Context, pgx.Tx, event.Event, int) error { return nil })
		},
		"produced twice": func() { a.Produces(pongEvent, pongEvent) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
	_ = a.Close()
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// One service registers v1 and v2 of a type: each event goes to the handler of its
// ce_dataschemaversion, decoded as that version's payload; a version nobody registered
// and a payload its schema refuses are dead-lettered. Declarations lists both versions.
func TestOnVersions(t *testing.T) {
	ctx := context.Background()
	a := newTestApp(t, app.WithSchema("widget", `CREATE TABLE IF NOT EXISTS seen (id text PRIMARY KEY, version int NOT NULL)`))
	type v2 struct {
		ID   string `json:"id"`
		Size int    `json:"size" jsonschema:"minimum=1"`
	}
	seen := func(version int) func(ctx context.Context, tx pgx.Tx, ev event.Event, id string) error {
		return func(ctx context.Context, tx pgx.Tx, ev event.Event, id string) error {
			_, err := tx.Exec(ctx, `INSERT INTO seen (id, version) VALUES ($1, $2)`, id, version)
			return err
		}
	}
	app.On(a.App, "widgets.in", "widget.made", 1, func(ctx context.Context, tx pgx.Tx, ev event.Event, p widget) error {
		return seen(1)(ctx, tx, ev, p.ID)
	})
	app.On(a.App, "widgets.in", "widget.made", 2, func(ctx context.Context, tx pgx.Tx, ev event.Event, p v2) error {
		return seen(2)(ctx, tx, ev, p.ID)
	})
	var versions []int
	for _, d := range a.Contracts() {
		versions = append(versions, d.Version)
	}
	if len(versions) != 2 || versions[0] != 1 || versions[1] != 2 {
		t.Errorf("declared versions %v, want [1 2]", versions)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	apptest.WaitReady(t, a.base)
	k := apptest.NewKafka(t, a.brokers)
	made := func(subject string, version int, data any) event.Event {
		ev := apptest.NewEvent(t, "test", "widget.made", subject, data)
		ev.SchemaVersion = version
		return ev
	}
	k.Produce("widgets.in", made("w-1", 1, widget{ID: "w-1"}))
	k.Produce("widgets.in", made("w-2", 2, v2{ID: "w-2", Size: 3}))
	k.Produce("widgets.in", made("w-3", 3, v2{ID: "w-3", Size: 3}))
	k.Produce("widgets.in", made("w-4", 2, v2{ID: "w-4"})) // size 0 < minimum
	apptest.WaitFor(t, "two dead letters", func() bool { return len(k.ReadAll("widgets.in.dlq")) == 2 })
	k.WaitSettled(a.Pool, "", map[string][]string{"widget": {"widgets.in"}})
	rows, err := a.Pool.Query(ctx, `SELECT id, version FROM seen ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToMap)
	if err != nil || len(got) != 2 || got[0]["version"] != int32(1) || got[1]["version"] != int32(2) {
		t.Errorf("handled %v (%v), want w-1 by v1 and w-2 by v2", got, err)
	}
	reasons := map[string]string{}
	for _, r := range k.ReadAll("widgets.in.dlq") {
		reasons[string(r.Key)] = header(r, consumer.HeaderDLQReason)
	}
	if reasons["w-3"] != consumer.ReasonUnknownType || reasons["w-4"] != consumer.ReasonMalformed {
		t.Errorf("dead-letter reasons %v, want w-3 %s and w-4 %s", reasons, consumer.ReasonUnknownType, consumer.ReasonMalformed)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
