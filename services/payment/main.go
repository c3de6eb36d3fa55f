// Command payment runs the payment service of the choreo reference saga. See package
// paymentsvc for what it does and the environment variables it reads.
package main

import (
	"github.com/choreo-saga/choreo/services/internal/sagasvc"
	"github.com/choreo-saga/choreo/services/payment/paymentsvc"
)

func main() { sagasvc.Main("payment", paymentsvc.LoadConfig, paymentsvc.Run) }
