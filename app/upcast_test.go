package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
)

// WithUpcaster: the kit's handler of widget.ping is given version 2 only. A v1 event is
// upcast (the field renamed) and a v2 one passes as it is, each handled once; a v3
// event, which no upcaster leads from, is dead-lettered as unsupported_version and a v1
// payload the upcaster refuses as upcast_failed.
func TestWithUpcaster(t *testing.T) {
	ctx := context.Background()
	v1to2 := func(data json.RawMessage) (json.RawMessage, error) {
		var p struct{ Name string }
		if err := json.Unmarshal(data, &p); err != nil {
			return nil, err
		}
		if p.Name == "" {
			return nil, errors.New("no name")
		}
		return json.Marshal(map[string]string{"label": p.Name})
	}
	a := newTestApp(t, app.WithUpcaster("widget.ping", 1, 2, v1to2))
	var (
		mu   sync.Mutex
		seen = map[string]string{} // subject → "v<version> <label>"
	)
	type labelled struct {
		Label string `json:"label"`
	}
	app.On(a.App, "widgets.in", "widget.ping", 2, func(ctx context.Context, tx pgx.Tx, ev event.Event, p labelled) error {
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
		at(1, "w-4", map[string]string{}))
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
	if len(reasons) != 2 || reasons["w-3"] != consumer.ReasonUnsupported || reasons["w-4"] != consumer.ReasonUpcastFailed {
		t.Errorf("dead letters %v; want w-3 unsupported_version and w-4 upcast_failed", reasons)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// New refuses an invalid WithUpcaster.
func TestWithUpcasterInvalid(t *testing.T) {
	id := func(d json.RawMessage) (json.RawMessage, error) { return d, nil }
	_, err := app.New(context.Background(), "widget", app.WithConfig(app.Config{}),
		app.WithUpcaster("widget.ping", 2, 1, id))
	if !errors.Is(err, app.ErrInvalidConfig) || !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("New = %v; want ErrInvalidConfig", err)
	}
}

// The kit declares the versions registered with On: with handlers of widget.ping v1 and
// v2 and upcasters 1 → 2 → 3 (a chain shared with a newer service), v1 and v2 events
// are each given to the handler of their version, never upcast to v3, which this
// service has no handler of; a v3 event is dead-lettered as unsupported_version.
func TestWithUpcasterDeclaresOnVersions(t *testing.T) {
	ctx := context.Background()
	rename := func(data json.RawMessage) (json.RawMessage, error) { return data, nil }
	a := newTestApp(t, app.WithUpcaster("widget.ping", 1, 2, rename), app.WithUpcaster("widget.ping", 2, 3, rename))
	var (
		mu   sync.Mutex
		seen = map[string]string{} // subject → "handler v<registered> got v<version>;"
	)
	type ping struct {
		Label string `json:"label"`
	}
	for _, v := range []int{1, 2} {
		app.On(a.App, "widgets.in", "widget.ping", v, func(ctx context.Context, tx pgx.Tx, ev event.Event, p ping) error {
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
		ev := apptest.NewEvent(t, "test", "widget.ping", subject, ping{Label: subject})
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
