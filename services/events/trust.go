package events

import "github.com/choreo-saga/choreo/consumer"

// Trust declares on r where each of the saga's event types comes from, and returns r:
// order.* only from source "order" on orders.events, payment.* only from "payment" on
// payments.events, stock.* only from "inventory" on inventory.events. Anything else is
// dead-lettered as untrusted (consumer.ReasonUntrusted) and never applied. The broker's
// ACLs, which let only the payment service write payments.events and so on, are the
// real boundary; see docs/operations.md.
//
// It also declares the form of a subject (ValidSubject), so that an event about
// "../../etc" is dead-lettered as malformed before a lock or fence key is made from it.
func Trust(r *consumer.Router) *consumer.Router {
	return r.Subjects(ValidSubject).
		Trust(SourceOrder, TopicOrders, OrderCreated, OrderConfirmed, OrderRejected, OrderCancelRequested, OrderCancelled).
		Trust(SourcePayment, TopicPayments, PaymentAuthorized, PaymentDeclined, PaymentRefunded).
		Trust(SourceInventory, TopicInventory, StockReserved, StockUnavailable, StockReleased)
}
