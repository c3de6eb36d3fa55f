package ordersvc_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

// Decide is the transition table at work: a cancelled order whose payment was refunded
// completes when inventory reports the release, and a confirmed order cannot be
// cancelled.
func ExampleDecide() {
	facts := ordersvc.Facts{PaymentAuthorized: true, StockReserved: true, PaymentRefunded: true}
	d, err := ordersvc.Decide(ordersvc.Cancelling, facts, ordersvc.OnStockReleased)
	fmt.Println(d.From, "->", d.To, d.Emit, err)

	// Without the refund, the release alone leaves the order waiting.
	d, _ = ordersvc.Decide(ordersvc.Cancelling, ordersvc.Facts{PaymentAuthorized: true, StockReserved: true}, ordersvc.OnStockReleased)
	fmt.Println(d.From, "->", d.To, d.Facts.PaymentStatus(), d.Facts.StockStatus())

	_, err = ordersvc.Decide(ordersvc.Confirmed, ordersvc.Facts{}, ordersvc.CmdCancel)
	fmt.Println(errors.Is(err, ordersvc.ErrInvalidTransition))
	// Output:
	// CANCELLING -> CANCELLED order.cancelled <nil>
	// CANCELLING -> CANCELLING authorized released
	// true
}

func ExampleCreateRequest_Validate() {
	req := ordersvc.CreateRequest{CustomerID: "c-1", Amount: 4200}
	fmt.Println(req.Validate())
	// Output:
	// ordersvc: invalid request: items must hold at least one item
}

// A service binary reads its configuration from the environment, reports every problem
// at once, and runs until SIGTERM.
func ExampleRun() {
	env := app.NewEnv(nil) // DATABASE_URL, KAFKA_BROKERS, ORDER_STUCK_AFTER, ...
	cfg := ordersvc.LoadConfig(env)
	if err := env.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := ordersvc.Run(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
