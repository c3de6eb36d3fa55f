package events

import (
	"fmt"

	"github.com/choreo-saga/choreo/event"
)

// Payload is implemented by every payload type of the saga: each is about one order,
// whose id is also the event's subject (and Kafka key).
type Payload interface {
	// Subject returns the id of the order the payload is about.
	Subject() string
}

// Subject returns p.OrderID.
func (p OrderCreatedV1) Subject() string { return p.OrderID }

// Subject returns p.OrderID.
func (p OrderCancelRequestedV1) Subject() string { return p.OrderID }

// Subject returns p.OrderID.
func (p OrderOutcomeV1) Subject() string { return p.OrderID }

// Subject returns p.OrderID.
func (p PaymentV1) Subject() string { return p.OrderID }

// Subject returns p.OrderID.
func (p StockV1) Subject() string { return p.OrderID }

// Decode returns ev's payload as a T, after checking that it names the event's subject as
// its order. A payload that does not unmarshal into a T, or whose order id is empty or
// differs from ev.Subject, or a string field past its bound (MaxIDBytes, MaxReasonBytes,
// MaxItems), can never be handled: the error matches event.ErrInvalidPayload
// and event.ErrMalformed, so a consumer dead-letters the event at once (reason
// "malformed"). Handlers wrap it with their own sentinel:
//
//	p, err := events.Decode[events.PaymentV1](ev)
//	if err != nil {
//		return fmt.Errorf("%w: %w", ErrInvalidEvent, err)
//	}
func Decode[T Payload](ev event.Event) (T, error) {
	var p, zero T
	if err := ev.DecodeData(&p); err != nil {
		return zero, fmt.Errorf("%s: %w", ev.Type, err)
	}
	if id := p.Subject(); id == "" || id != ev.Subject {
		return zero, fmt.Errorf("%s: %w", ev.Type, &event.Error{Field: "data", Kind: event.ErrInvalidPayload,
			Detail: fmt.Sprintf("order_id %q is not the subject %q", clip(id), clip(ev.Subject))})
	}
	if err := checkBounds(p); err != nil {
		return zero, boundsError(ev.Type, err)
	}
	return p, nil
}
