// Package events defines the demo saga's topics, event types, payloads and producers:
// the only code the order, payment and inventory services share. Each payload is
// versioned by the event's SchemaVersion (all are version 1); its JSON Schema comes from
// its Go type and struct tags (contract.SchemaFor), and contract.Decode (which app.On
// runs before a handler) enforces it and checks that the payload is about the event's
// subject, the order id. docs/events.md is generated from the services' declarations.
package events

import (
	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/consumer"
)

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
	SKU string `json:"sku" jsonschema:"maxLength=128,example=sku-1" jsonschema_description:"Stock keeping unit of the line."`
	Qty int    `json:"qty" jsonschema:"example=2" jsonschema_description:"Units of the SKU ordered."`
}

// OrderCreatedV1 is the payload of order.created.
type OrderCreatedV1 struct {
	OrderID    string `json:"order_id" jsonschema:"maxLength=128,example=0197b3b8-7c1e-7a55-9b4e-5a1f3c2d1e0f" jsonschema_description:"The order (also the event's subject and Kafka key)."`
	CustomerID string `json:"customer_id" jsonschema:"maxLength=128,example=c-1" jsonschema_description:"The customer who placed the order."`
	Items      []Item `json:"items" jsonschema:"maxItems=100" jsonschema_description:"The lines of the order."`
	// Amount is the order total in cents.
	Amount int64 `json:"amount" jsonschema:"example=500" jsonschema_description:"The order total, in cents."`
}

// OrderCancelRequestedV1 is the payload of order.cancel_requested.
type OrderCancelRequestedV1 struct {
	OrderID string `json:"order_id" jsonschema:"maxLength=128,example=0197b3b8-7c1e-7a55-9b4e-5a1f3c2d1e0f" jsonschema_description:"The order (also the event's subject and Kafka key)."`
	Reason  string `json:"reason" jsonschema:"maxLength=256,example=saga deadline exceeded" jsonschema_description:"Why the order is cancelled."`
	// Attempt numbers the sends of the cancellation: 1 for the first, 2 and more when
	// the order re-sends it because the refund or release did not arrive in time (0,
	// from an older producer, means 1). Payment and inventory compensate at most once
	// per order whatever the attempt, and answer a re-send again (see Resend).
	Attempt int `json:"attempt,omitempty" jsonschema:"example=1" jsonschema_description:"Numbers the sends of the cancellation (absent or 1: the first; 2 and more: a re-send, answered again)."`
}

// Resend reports whether p is a re-sent cancellation (Attempt > 1): its receiver
// repeats its answer if it already gave one, since that answer may not have reached the
// order service.
func (p OrderCancelRequestedV1) Resend() bool { return p.Attempt > 1 }

// OrderOutcomeV1 is the payload of order.confirmed, order.rejected and order.cancelled.
type OrderOutcomeV1 struct {
	OrderID string `json:"order_id" jsonschema:"maxLength=128,example=0197b3b8-7c1e-7a55-9b4e-5a1f3c2d1e0f" jsonschema_description:"The order (also the event's subject and Kafka key)."`
	Reason  string `json:"reason,omitempty" jsonschema:"maxLength=256,example=payment declined: over limit" jsonschema_description:"Why the order was rejected or cancelled (absent when confirmed)."`
}

// PaymentV1 is the payload of payment.authorized, payment.declined and payment.refunded.
type PaymentV1 struct {
	OrderID    string `json:"order_id" jsonschema:"maxLength=128,example=0197b3b8-7c1e-7a55-9b4e-5a1f3c2d1e0f" jsonschema_description:"The order (also the event's subject and Kafka key)."`
	CustomerID string `json:"customer_id" jsonschema:"maxLength=128,example=c-1" jsonschema_description:"The customer charged or refunded."`
	Amount     int64  `json:"amount" jsonschema:"example=500" jsonschema_description:"The amount charged, declined or refunded, in cents."`
	// Items travel with the payment so inventory can reserve without asking order.
	Items  []Item `json:"items,omitempty" jsonschema:"maxItems=100" jsonschema_description:"The order's lines, so that inventory reserves without asking the order service."`
	Reason string `json:"reason,omitempty" jsonschema:"maxLength=256,example=over limit" jsonschema_description:"Why the payment was declined or refunded."`
}

// PaymentAuthorizedV2 is the payload of payment.authorized from schema version 2: the
// amount names its unit and carries its currency. Payment writes v1 or v2
// (PAYMENT_AUTHORIZED_VERSION); order and inventory handle v2 and upcast v1 with
// UpcastPaymentAuthorized, so they read both while the payment instances move to v2.
type PaymentAuthorizedV2 struct {
	OrderID     string `json:"order_id" jsonschema:"maxLength=128,example=0197b3b8-7c1e-7a55-9b4e-5a1f3c2d1e0f" jsonschema_description:"The order (also the event's subject and Kafka key)."`
	CustomerID  string `json:"customer_id" jsonschema:"maxLength=128,example=c-1" jsonschema_description:"The customer charged."`
	AmountCents int64  `json:"amount_cents" jsonschema:"example=500" jsonschema_description:"The amount charged, in cents of the currency."`
	Currency    string `json:"currency" jsonschema:"pattern=^[A-Z]{3}$,example=EUR" jsonschema_description:"The ISO 4217 code of the amount's currency."`
	Items       []Item `json:"items,omitempty" jsonschema:"maxItems=100" jsonschema_description:"The order's lines, so that inventory reserves without asking the order service."`
}

// Currency is the currency of the saga's amounts: v1 payloads carry cents of it
// implicitly.
const Currency = "EUR"

// UpcastPaymentAuthorized brings a payment.authorized from v1 to v2: amount becomes
// amount_cents, and the currency, implicit in v1, is Currency.
func UpcastPaymentAuthorized(p PaymentV1) (PaymentAuthorizedV2, error) {
	return PaymentAuthorizedV2{OrderID: p.OrderID, CustomerID: p.CustomerID, AmountCents: p.Amount, Currency: Currency, Items: p.Items}, nil
}

// StockV1 is the payload of stock.reserved, stock.unavailable and stock.released.
type StockV1 struct {
	OrderID string `json:"order_id" jsonschema:"maxLength=128,example=0197b3b8-7c1e-7a55-9b4e-5a1f3c2d1e0f" jsonschema_description:"The order (also the event's subject and Kafka key)."`
	Items   []Item `json:"items" jsonschema:"maxItems=100" jsonschema_description:"The lines reserved, unavailable or released."`
	Reason  string `json:"reason,omitempty" jsonschema:"maxLength=256,example=insufficient stock" jsonschema_description:"Why the stock is unavailable or was released."`
}

// Subject returns p.OrderID: every payload of the saga is about one order, whose id is
// also the event's subject (and Kafka key); contract.Decode checks that they agree.
func (p OrderCreatedV1) Subject() string { return p.OrderID }

// Subject returns p.OrderID.
func (p OrderCancelRequestedV1) Subject() string { return p.OrderID }

// Subject returns p.OrderID.
func (p OrderOutcomeV1) Subject() string { return p.OrderID }

// Subject returns p.OrderID.
func (p PaymentV1) Subject() string { return p.OrderID }

// Subject returns p.OrderID.
func (p StockV1) Subject() string { return p.OrderID }

// Subject returns p.OrderID.
func (p PaymentAuthorizedV2) Subject() string { return p.OrderID }

// Producers of the saga's events: each service declares its own with app.App.Produces
// and builds its events with them, so that type, version and payload schema come from
// one declaration. Every payload is at version 1 except payment.authorized, which payment
// may write at version 2.
var (
	OrderCreatedEvent         = app.Producer[OrderCreatedV1]{Source: SourceOrder, Topic: TopicOrders, Type: OrderCreated, Version: 1}
	OrderConfirmedEvent       = app.Producer[OrderOutcomeV1]{Source: SourceOrder, Topic: TopicOrders, Type: OrderConfirmed, Version: 1}
	OrderRejectedEvent        = app.Producer[OrderOutcomeV1]{Source: SourceOrder, Topic: TopicOrders, Type: OrderRejected, Version: 1}
	OrderCancelRequestedEvent = app.Producer[OrderCancelRequestedV1]{Source: SourceOrder, Topic: TopicOrders, Type: OrderCancelRequested, Version: 1}
	OrderCancelledEvent       = app.Producer[OrderOutcomeV1]{Source: SourceOrder, Topic: TopicOrders, Type: OrderCancelled, Version: 1}
	PaymentAuthorizedEvent    = app.Producer[PaymentV1]{Source: SourcePayment, Topic: TopicPayments, Type: PaymentAuthorized, Version: 1}
	PaymentAuthorizedV2Event  = app.Producer[PaymentAuthorizedV2]{Source: SourcePayment, Topic: TopicPayments, Type: PaymentAuthorized, Version: 2}
	PaymentDeclinedEvent      = app.Producer[PaymentV1]{Source: SourcePayment, Topic: TopicPayments, Type: PaymentDeclined, Version: 1}
	PaymentRefundedEvent      = app.Producer[PaymentV1]{Source: SourcePayment, Topic: TopicPayments, Type: PaymentRefunded, Version: 1}
	StockReservedEvent        = app.Producer[StockV1]{Source: SourceInventory, Topic: TopicInventory, Type: StockReserved, Version: 1}
	StockUnavailableEvent     = app.Producer[StockV1]{Source: SourceInventory, Topic: TopicInventory, Type: StockUnavailable, Version: 1}
	StockReleasedEvent        = app.Producer[StockV1]{Source: SourceInventory, Topic: TopicInventory, Type: StockReleased, Version: 1}
)

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
