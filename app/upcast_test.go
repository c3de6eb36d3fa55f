package app_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
)

// Upcast: the kit's handler of widget.ping is given version 2 only. A v1 event is
// upcast (the field renamed) and a v2 one passes as it is, each handled once; a v3
// event, which no upcaster leads from, is dead-lettered as unsupported_version, and a v1
// payload the upcaster refuses as upcast_failed; one outside pingV1's schema is malformed.
func TestUpcast(t *testing.T) {
	ctx := context.Background()
	a := newTestApp(t)
	app.Upcast(a.App, "widget.ping", 1, 2, v1to2)
	var (
		mu   sync.Mutex
		seen = map[string]string{} // subject → "v<version> <label>"
	)
	app.On(a.App, "widgets.in", "widget.ping", 2, func(ctx context.Context, tx pgx.Tx, ev event.Event, p pingV2) error {
		mu.Lock()
		defer mu.Unlock()
		seen[ev.Subject] += fmt.Sprintf("v%d %s;", ev.SchemaVersion, p.Label)
		return nil
	})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	apptest.WaitReady(t, a.base)
	k := apptest.NewKafka(t, a.brokers)
	at := func(v int, subject string, data any) event.Event {
		ev := apptest.NewEvent(t, "test", "widget.ping", subject, data)
		ev.SchemaVersion = v
		return ev
	}
	k.Produce("widgets.in",
		at(1, "w-1", map[string]string{"name": "one"}),
		at(2, "w-2", map[string]string{"label": "two"}),
		at(3, "w-3", map[string]string{"label": "three", "colour": "red"}),
		at(1, "w-4", map[string]string{"name": ""}),
		at(1, "w-5", map[string]int{"name": 5}))
	k.WaitSettled(a.Pool, "", map[string][]string{"widget": {"widgets.in"}})

	mu.Lock()
	if len(seen) != 2 || seen["w-1"] != "v2 one;" || seen["w-2"] != "v2 two;" {
		t.Errorf("handled %v; want w-1 upcast to v2 and w-2 at v2, once each", seen)
	}
	mu.Unlock()
	reasons := map[string]string{}
	for _, r := range k.ReadAll("widgets.in.dlq") {
		reasons[string(r.Key)] = header(r, consumer.HeaderDLQReason)
	}
	if len(reasons) != 3 || reasons["w-3"] != consumer.ReasonUnsupported || reasons["w-4"] != consumer.ReasonUpcastFailed ||
		reasons["w-5"] != consumer.ReasonMalformed {
		t.Errorf("dead letters %v; want w-3 unsupported_version, w-4 upcast_failed, w-5 malformed", reasons)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type pingV1 struct {
	Name string `json:"name"`
}

type pingV2 struct {
	Label string `json:"label"`
}

func v1to2(p pingV1) (pingV2, error) {
	if p.Name == "" {
		return pingV2{}, errors.New("no name")
	}
	return pingV2{Label: p.Name}, nil
}

// Upcast panics on an invalid registration, as On does.
func TestUpcastInvalid(t *testing.T) {
	for name, register := range map[string]func(a *app.App){
		"versions out of order": func(a *app.App) { app.Upcast(a, "widget.ping", 2, 1, v1to2) },
		"empty type":            func(a *app.App) { app.Upcast(a, "", 1, 2, v1to2) },
		"nil upcaster":          func(a *app.App) { app.Upcast[pingV1, pingV2](a, "widget.ping", 1, 2, nil) },
		"second from v1": func(a *app.App) {
			app.Upcast(a, "widget.ping", 1, 2, v1to2)
			app.Upcast(a, "widget.ping", 1, 3, v1to2)
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Upcast did not panic", name)
				}
			}()
			app.Declarations("widget", register)
		}()
	}
}

// An upcaster declares the version it reads with the role accepts and its input's
// schema, only when it leads to a handler, and never for a version that has its own.
func TestUpcastDeclaresAccepts(t *testing.T) {
	decls := app.Declarations("widget", func(a *app.App) {
		app.On(a, "widgets.in", "widget.ping", 3, func(context.Context, pgx.Tx, event.Event, pingV2) error { return nil })
		app.On(a, "widgets.in", "widget.ping", 2, func(context.Context, pgx.Tx, event.Event, pingV2) error { return nil })
		app.Upcast(a, "widget.ping", 1, 2, v1to2)
		app.Upcast(a, "widget.ping", 2, 3, func(p pingV2) (pingV2, error) { return p, nil })
		app.Upcast(a, "widget.pong", 1, 2, v1to2) // no handler of widget.pong
	})
	var got []string
	for _, d := range decls {
		got = append(got, fmt.Sprintf("%s %s v%d %s %s", d.Role, d.Type, d.Version, d.Topic, d.Payload))
	}
	want := []string{"consumes widget.ping v3 widgets.in app_test.pingV2", "consumes widget.ping v2 widgets.in app_test.pingV2",
		"accepts widget.ping v1 widgets.in app_test.pingV1"}
	if !slices.Equal(got, want) {
		t.Errorf("declarations %q, want %q", got, want)
	}
	if !strings.Contains(string(decls[2].Schema), `"name"`) {
		t.Errorf("accepts schema %s, want pingV1's", decls[2].Schema)
	}
}

// The kit declares the versions registered with On: with handlers of widget.ping v1 and
// v2 and upcasters 1 → 2 → 3 (a chain shared with a newer service), v1 and v2 events
// are each given to the handler of their version, never upcast to v3, which this
// service has no handler of; a v3 event is dead-lettered as unsupported_version.
func TestUpcastDeclaresOnVersions(t *testing.T) {
	ctx := context.Background()
	same := func(p pingV2) (pingV2, error) { return p, nil }
	a := newTestApp(t)
	app.Upcast(a.App, "widget.ping", 1, 2, same)
	app.Upcast(a.App, "widget.ping", 2, 3, same)
	var (
		mu   sync.Mutex
		seen = map[string]string{} // subject → "handler v<registered> got v<version>;"
	)
	for _, v := range []int{1, 2} {
		app.On(a.App, "widgets.in", "widget.ping", v, func(ctx context.Context, tx pgx.Tx, ev event.Event, p pingV2) error {
			mu.Lock()
			defer mu.Unlock()
			seen[ev.Subject] += fmt.Sprintf("handler v%d got v%d;", v, ev.SchemaVersion)
			return nil
		})
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	apptest.WaitReady(t, a.base)
	k := apptest.NewKafka(t, a.brokers)
	at := func(v int, subject string) event.Event {
		ev := apptest.NewEvent(t, "test", "widget.ping", subject, pingV2{Label: subject})
		ev.SchemaVersion = v
		return ev
	}
	k.Produce("widgets.in", at(1, "w-1"), at(2, "w-2"), at(3, "w-3"))
	k.WaitSettled(a.Pool, "", map[string][]string{"widget": {"widgets.in"}})

	mu.Lock()
	if len(seen) != 2 || seen["w-1"] != "handler v1 got v1;" || seen["w-2"] != "handler v2 got v2;" {
		t.Errorf("handled %v; want w-1 by the v1 handler and w-2 by the v2 one, at their versions, once each", seen)
	}
	mu.Unlock()
	reasons := map[string]string{}
	for _, r := range k.ReadAll("widgets.in.dlq") {
		reasons[string(r.Key)] = header(r, consumer.HeaderDLQReason)
	}
	if len(reasons) != 1 || reasons["w-3"] != consumer.ReasonUnsupported {
		t.Errorf("dead letters %v; want only w-3, unsupported_version", reasons)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
