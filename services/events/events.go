// Package events defines the demo saga's topics, event types and payloads: the only code
// the order, payment and inventory services share. Each payload is versioned by the
// event's SchemaVersion (all are version 1). Decode turns an event into its typed payload
// and checks that the payload is about the event's subject, the order id.
package events

import "github.com/choreo-saga/choreo/consumer"

// Topics. Every event of one order is keyed by the order id, so per-order order holds on
// each topic.
const (
	TopicOrders    = "orders.events"
	TopicPayments  = "payments.events"
	TopicInventory = "inventory.events"
)

// Topics lists every topic of the saga, for topic creation at start-up.
var Topics = []string{TopicOrders, TopicPayments, TopicInventory}

// Sources: the service names in ce_source.
const (
	SourceOrder     = "order"
	SourcePayment   = "payment"
	SourceInventory = "inventory"
)

// Event types, by topic.
const (
	// On TopicOrders.
	OrderCreated         = "order.created"
	OrderConfirmed       = "order.confirmed"
	OrderRejected        = "order.rejected"
	OrderCancelRequested = "order.cancel_requested"
	OrderCancelled       = "order.cancelled"

	// On TopicPayments.
	PaymentAuthorized = "payment.authorized"
	PaymentDeclined   = "payment.declined"
	PaymentRefunded   = "payment.refunded"

	// On TopicInventory.
	StockReserved    = "stock.reserved"
	StockUnavailable = "stock.unavailable"
	StockReleased    = "stock.released"
)

// ReasonMismatch is the dead-letter reason (consumer.Reject) of a payment.authorized or
// stock.reserved whose amount, customer or items differ from the order the order service
// announced: a forged or corrupted event, never applied. It is consumer.ReasonMismatch.
const ReasonMismatch = consumer.ReasonMismatch

// Item is one line of an order.
type Item struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// OrderCreatedV1 is the payload of order.created.
type OrderCreatedV1 struct {
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Items      []Item `json:"items"`
	// Amount is the order total in cents.
	Amount int64 `json:"amount"`
}

// OrderCancelRequestedV1 is the payload of order.cancel_requested.
type OrderCancelRequestedV1 struct {
	OrderID string `json:"order_id"`
	Reason  string `json:"reason"`
	// Attempt numbers the sends of the cancellation: 1 for the first, 2 and more when
	// the order re-sends it because the refund or release did not arrive in time (0,
	// from an older producer, means 1). Payment and inventory compensate at most once
	// per order whatever the attempt, and answer a re-send again (see Resend).
	Attempt int `json:"attempt,omitempty"`
}

// Resend reports whether p is a re-sent cancellation (Attempt > 1): its receiver
// repeats its answer if it already gave one, since that answer may not have reached the
// order service.
func (p OrderCancelRequestedV1) Resend() bool { return p.Attempt > 1 }

// OrderOutcomeV1 is the payload of order.confirmed, order.rejected and order.cancelled.
type OrderOutcomeV1 struct {
	OrderID string `json:"order_id"`
	Reason  string `json:"reason,omitempty"`
}

// PaymentV1 is the payload of payment.authorized, payment.declined and payment.refunded.
type PaymentV1 struct {
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	// Items travel with the payment so inventory can reserve without asking order.
	Items  []Item `json:"items,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// StockV1 is the payload of stock.reserved, stock.unavailable and stock.released.
type StockV1 struct {
	OrderID string `json:"order_id"`
	Items   []Item `json:"items"`
	Reason  string `json:"reason,omitempty"`
}

// SameItems reports whether a and b order the same quantity of every SKU, whatever the
// order of their lines and however a SKU's quantity is split over lines.
func SameItems(a, b []Item) bool {
	sum := make(map[string]int, len(a))
	for _, it := range a {
		sum[it.SKU] += it.Qty
	}
	for _, it := range b {
		sum[it.SKU] -= it.Qty
	}
	for _, n := range sum {
		if n != 0 {
			return false
		}
	}
	return true
}
