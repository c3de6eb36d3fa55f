package ordersvc

import "errors"

// Sentinel errors, matched with errors.Is.
var (
	// ErrInvalidTransition: the transition table has no rule for the order's state and
	// the trigger. Nothing is applied. HTTP answers 409 invalid_transition; the consumer
	// records the event as ignored and does not retry it.
	ErrInvalidTransition = errors.New("ordersvc: invalid transition")
	// ErrNotFound: no order with that id.
	ErrNotFound = errors.New("ordersvc: order not found")
	// ErrInvalidRequest: the request failed validation. HTTP answers 400 invalid_request
	// with the message.
	ErrInvalidRequest = errors.New("ordersvc: invalid request")
	// ErrOverloaded: a new order was refused because too many orders are in flight in
	// the saga (WithMaxPending). Nothing is written. HTTP answers 503 overloaded with
	// Retry-After; the client retries later with the same Idempotency-Key.
	ErrOverloaded = errors.New("ordersvc: overloaded")
	// ErrMismatch: a payment.authorized or stock.reserved differs from the order it is
	// about (amount, customer or items). The event is never applied: it is dead-lettered
	// with reason events.ReasonMismatch (consumer.Reject) and a PENDING order is
	// cancelled (event.mismatch), so that payment refunds and inventory releases.
	ErrMismatch = errors.New("ordersvc: event does not match the order")
)
