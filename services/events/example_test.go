package events_test

import (
	"errors"
	"fmt"

	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
)

// A handler's payload is decoded with contract.Decode (app.On does it before the handler
// runs); a payload about another order than the event's subject is malformed input.
func Example_decode() {
	ev, err := event.New(events.SourcePayment, events.PaymentAuthorized, "o-1",
		events.PaymentV1{OrderID: "o-1", CustomerID: "c-1", Amount: 500})
	if err != nil {
		panic(err)
	}
	p, err := contract.Decode[events.PaymentV1](ev)
	fmt.Println(p.OrderID, p.Amount, err)

	ev.Subject = "o-2"
	_, err = contract.Decode[events.PaymentV1](ev)
	fmt.Println(errors.Is(err, event.ErrMalformed), err)
	// Output:
	// o-1 500 <nil>
	// true payment.authorized: event: invalid payload: data: payload is about "o-1", not the subject "o-2"
}
