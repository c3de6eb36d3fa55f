// Package saga assembles the reference saga's contracts: the declarations the order,
// payment and inventory services make when they register their handlers and producers
// (app.On, app.App.Produces), gathered without connecting to anything
// (app.Declarations). `sagactl contracts` writes docs/events.md and the AsyncAPI
// document from them and checks them against the committed baseline.
package saga

import (
	"slices"

	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/services/inventory/inventorysvc"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
	"github.com/choreo-saga/choreo/services/payment/paymentsvc"
)

// Contracts returns the catalogue of the reference saga: per event type and version, the
// schema its producer writes and each consumer reads.
func Contracts() (contract.Catalogue, error) {
	return contract.NewCatalogue(slices.Concat(ordersvc.Contracts(), paymentsvc.Contracts(), inventorysvc.Contracts())...)
}
