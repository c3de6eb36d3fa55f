// Command inventory runs the inventory service of the choreo reference saga. See package
// inventorysvc for what it does and the environment variables it reads.
package main

import (
	"github.com/choreo-saga/choreo/services/internal/sagasvc"
	"github.com/choreo-saga/choreo/services/inventory/inventorysvc"
)

func main() { sagasvc.Main("inventory", inventorysvc.LoadConfig, inventorysvc.Run) }
