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

// The front door: Handle per topic and event type, Publish through the outbox in the
// handler's transaction, topics and their .dlq created by Run. A type registered on
// one topic is ignored on another, and an unregistered type is ignored; LockOn locks
// the entity it names; Publish refuses an undeclared topic. An event published in a
// handler continues the handled event's saga: its causation id is the handled event's
// id and its correlation id the handled event's, unless the handler set them.
func TestHandleAndPublish(t *testing.T) {
	ctx := context.Background()
	a := newTestApp(t, app.WithTopics("widgets.out"), app.WithGroup("widget-kit"),
		app.WithSchema("widget", `CREATE TABLE IF NOT EXISTS pings (id text PRIMARY KEY, locked text NOT NULL)`))
	var undeclared error
	a.Handle("widgets.in", "widget.ping", func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if _, err := tx.Exec(ctx, `INSERT INTO pings (id, locked) VALUES ($1, $2)`, ev.Subject, "owner-"+ev.Subject); err != nil {
			return err
		}
		out, err := event.New("widget", "widget.pong", ev.Subject, map[string]string{"id": ev.Subject})
		if err != nil {
			return err
		}
		undeclared = a.Publish(ctx, tx, "widgets.elsewhere", out)
		own, err := event.New("widget", "widget.audited", "audit-"+ev.Subject, map[string]string{})
		if err != nil {
			return err
		}
		own.CorrelationID, own.CausationID = "audit", "audit-cause"
		if err := a.Publish(ctx, tx, "widgets.out", own); err != nil {
			return err
		}
		return a.Publish(ctx, tx, "widgets.out", out)
	}, app.LockOn(func(ev event.Event) string { return "owner-" + ev.Subject }))
	a.Handle("widgets.other", "widget.other", func(context.Context, pgx.Tx, event.Event) error { return nil })

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
	if !errors.Is(undeclared, app.ErrUndeclaredTopic) {
		t.Errorf("Publish to an undeclared topic = %v, want ErrUndeclaredTopic", undeclared)
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
	a.Handle("widgets.in", "widget.ping", func(context.Context, pgx.Tx, event.Event) error { return nil })
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

// Handle panics on a type registered twice and after Run, as http.ServeMux does.
func TestHandleProgrammingErrors(t *testing.T) {
	a := newTestApp(t)
	h := func(context.Context, pgx.Tx, event.Event) error { return nil }
	a.Handle("a", "t", h)
	for name, f := range map[string]func(){
		"twice":       func() { a.Handle("b", "t", h) },
		"empty type":  func() { a.Handle("a", "", h) },
		"nil handler": func() { a.Handle("a", "u", nil) },
		"empty topic": func() { a.Handle("", "u", h) },
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
