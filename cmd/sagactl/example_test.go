package main

import (
	"context"
	"fmt"
	"os"
)

// The mix of `sagactl load`: weights for the saga outcomes, an absolute count of
// deliberately stuck orders.
func Example_mix() {
	m, err := parseMix(defaultMix)
	if err != nil {
		fmt.Println(err)
		return
	}
	c, _ := m.counts(200)
	for _, k := range kinds {
		fmt.Printf("%-7s %d\n", k, c[k])
	}
	// Output:
	// success 139
	// decline 20
	// oos     20
	// cancel  20
	// stuck   1
}

// A usage mistake exits with code 2 and says what is wrong.
func Example_exitCodes() {
	code := run(context.Background(), []string{"dlq", "show", "orders.events", "twelve"}, stdio{
		out: os.Stdout, err: os.Stdout, getenv: os.Getenv,
	})
	fmt.Println("exit", code)
	// Output:
	// sagactl: record position "twelve" must be partition:offset, e.g. 0:12
	// run "sagactl help" for usage
	// exit 2
}
