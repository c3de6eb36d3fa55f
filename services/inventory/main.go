// Command inventory runs the inventory service of the choreo reference saga. See package
// inventorysvc for what it does and the environment variables it reads.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/services/inventory/inventorysvc"
)

func main() {
	env := app.NewEnv(nil)
	cfg := inventorysvc.LoadConfig(env)
	if err := env.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "inventory: %v\n", err)
		os.Exit(2)
	}
	if err := inventorysvc.Run(context.Background(), cfg); err != nil {
		fmt.Fprintf(os.Stderr, "inventory: %v\n", err)
		os.Exit(1)
	}
}
