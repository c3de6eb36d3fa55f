package app_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/event"
)

// Reading configuration: every problem is reported at once, and the value of a
// secret-looking variable is never echoed.
func ExampleEnv() {
	env := app.MapEnv(map[string]string{
		"SHIPPING_RATE":  "1.5",
		"SHIPPING_DELAY": "soon",
		"DATABASE_URL":   "postgres://app:hunter2@db/shipping?sslmode=bogus",
	})
	rate := env.Float64("SHIPPING_RATE", 0)
	env.Check("SHIPPING_RATE", rate >= 0 && rate <= 1, "must be between 0 and 1")
	delay := env.Duration("SHIPPING_DELAY", time.Second)
	env.Fail("DATABASE_URL", "sslmode must be disable, require or verify-full")
	fmt.Println("delay falls back to", delay)
	fmt.Println(env.Err())
	// Output:
	// delay falls back to 1s
	// app: invalid configuration: SHIPPING_RATE="1.5": must be between 0 and 1
	// app: invalid configuration: SHIPPING_DELAY="soon": not a duration (e.g. "250ms", "5s", "1m")
	// app: invalid configuration: DATABASE_URL: sslmode must be disable, require or verify-full
}

// The shared variables and their defaults.
func ExampleLoadConfig() {
	env := app.MapEnv(map[string]string{"KAFKA_BROKERS": "k1:9092, k2:9092", "REDIS_ADDR": "none"})
	cfg := app.LoadConfig(env, "shipping", ":8090")
	fmt.Println(cfg.DatabaseName(), cfg.KafkaBrokers, cfg.RedisAddr == "", cfg.HTTPAddr, env.Err())
	// Output: choreo_shipping [k1:9092 k2:9092] true :8090 <nil>
}

// A whole service: a shipping service that schedules a shipment for every confirmed
// order and publishes shipment.scheduled through the outbox, in the same transaction.
func ExampleNew() {
	ctx := context.Background()
	type confirmed struct {
		OrderID string `json:"order_id"`
	}
	scheduled := app.Producer[confirmed]{Source: "shipping", Topic: "shipping.events", Type: "shipment.scheduled", Version: 1}
	svc, err := app.New(ctx, "shipping", // configuration from the environment
		app.WithSchema("shipping", `CREATE TABLE IF NOT EXISTS shipments (order_id text PRIMARY KEY)`))
	if err != nil {
		log.Fatal(err)
	}
	svc.Produces(scheduled)
	app.On(svc, "orders.events", "order.confirmed", 1, func(ctx context.Context, tx pgx.Tx, ev event.Event, in confirmed) error {
		if _, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1) ON CONFLICT DO NOTHING`, in.OrderID); err != nil {
			return err
		}
		return scheduled.Publish(ctx, tx, svc, ev.Subject, in) // caused by ev, in ev's saga
	})
	svc.HandleHTTPFunc("GET /shipments/{id}", func(w http.ResponseWriter, r *http.Request) {
		var id string
		err := svc.Pool.QueryRow(r.Context(), `SELECT order_id FROM shipments WHERE order_id = $1`, r.PathValue("id")).Scan(&id)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "shipment for %s scheduled\n", id)
	})
	// Blocks until SIGTERM, then shuts down in order: HTTP, consumers, relay, connections, telemetry.
	if err := svc.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
