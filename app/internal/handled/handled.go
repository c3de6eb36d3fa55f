// Package handled carries the event being handled in a context: the kit (package app)
// runs every handler in such a context, and apptest does the same for a handler it runs.
package handled

import (
	"context"

	"github.com/choreo-saga/choreo/event"
)

type key struct{}

// With returns ctx carrying ev as the event being handled.
func With(ctx context.Context, ev event.Event) context.Context {
	return context.WithValue(ctx, key{}, ev)
}

// From returns the event being handled in ctx.
func From(ctx context.Context) (event.Event, bool) {
	ev, ok := ctx.Value(key{}).(event.Event)
	return ev, ok
}
