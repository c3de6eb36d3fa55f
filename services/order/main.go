// Command order runs the order service of the choreo reference saga: the HTTP API that
// places and cancels orders, the order state machine driven by payment and inventory
// events, and the deadline sweeper. See package ordersvc for the environment variables
// it reads.
package main

import (
	"github.com/choreo-saga/choreo/services/internal/sagasvc"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

func main() { sagasvc.Main("order", ordersvc.LoadConfig, ordersvc.Run) }
