// Command order runs the order service of the choreo reference saga: the HTTP API that
// places and cancels orders, the order state machine driven by payment and inventory
// events, and the deadline sweeper. See package ordersvc for the environment variables
// it reads.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

func main() {
	env := app.NewEnv(nil)
	cfg := ordersvc.LoadConfig(env)
	if err := env.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "order: %v\n", err)
		os.Exit(2)
	}
	if err := ordersvc.Run(context.Background(), cfg); err != nil {
		fmt.Fprintf(os.Stderr, "order: %v\n", err)
		os.Exit(1)
	}
}
