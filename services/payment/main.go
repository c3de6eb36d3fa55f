// Command payment runs the payment service of the choreo reference saga. See package
// paymentsvc for what it does and the environment variables it reads.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/services/payment/paymentsvc"
)

func main() {
	env := app.NewEnv(nil)
	cfg := paymentsvc.LoadConfig(env)
	if err := env.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "payment: %v\n", err)
		os.Exit(2)
	}
	if err := paymentsvc.Run(context.Background(), cfg); err != nil {
		fmt.Fprintf(os.Stderr, "payment: %v\n", err)
		os.Exit(1)
	}
}
