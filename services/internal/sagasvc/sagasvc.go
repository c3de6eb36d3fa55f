// Package sagasvc starts a service of the reference saga (order, payment, inventory) on
// the service kit (package app) the way the three share: [Main] is their main function
// and [Run] builds the App with the options they have in common.
//
// It is shared by the services only, so it lives under services/, not in the library.
package sagasvc

import (
	"context"
	"fmt"
	"os"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/services/events"
)

// Main reads the configuration of service name from the environment with load and
// runs it with run until SIGINT or SIGTERM. It exits 2 when the configuration has a
// problem (every problem is printed at once) and 1 when run fails.
func Main[C any](name string, load func(*app.Env) C, run func(context.Context, C) error) {
	env := app.NewEnv(nil)
	cfg := load(env)
	if err := env.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	if err := run(context.Background(), cfg); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// Service is what one service of the saga adds to the kit.
type Service struct {
	// Name is the service's name, its schema's name and its idempotency handler name.
	Name string
	// Schema is the service's SQL schema (app.WithSchema).
	Schema string
	// App is the kit's configuration (app.WithConfig).
	App app.Config
	// Group is the consumer group of its handlers (app.WithGroup).
	Group string
	// Options come after the shared ones (tests: app.WithListener, app.WithoutSignals).
	Options []app.Option
	// Setup registers the service's handlers, routes and background functions on a.
	Setup func(ctx context.Context, a *app.App) error
}

// Run builds s on the kit and runs it until ctx ends (see app.App.Run). Every service of
// the saga declares the saga's topics, tags spans and logs with the order id
// (order.id), dead-letters event types it has no handler for and accepts each type only
// from its producer (events.Trust on a.Router, before Setup).
func Run(ctx context.Context, s Service) error {
	a, err := app.New(ctx, s.Name, append([]app.Option{app.WithConfig(s.App), app.WithEntityAttribute("order.id"),
		app.WithSchema(s.Name, s.Schema), app.WithTopics(events.Topics...), app.WithGroup(s.Group),
		app.WithHandlerName(s.Name), app.WithDeadLetterUnknownTypes()}, s.Options...)...)
	if err != nil {
		return err
	}
	events.Trust(a.Router)
	if err := s.Setup(ctx, a); err != nil {
		_ = a.Close()
		return err
	}
	return a.Run(ctx)
}
