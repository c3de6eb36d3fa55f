package event_test

import (
	"errors"
	"fmt"

	"github.com/choreo-saga/choreo/event"
	"github.com/twmb/franz-go/pkg/kgo"
)

func Example() {
	created, err := event.New("order", "order.created", "order-48271", map[string]any{"amount": 4200})
	if err != nil {
		panic(err)
	}
	// The payment service continues the saga: same correlation id, caused by created.
	authorized, _ := event.New("payment", "payment.authorized", "order-48271", map[string]any{"charged": 4200})
	authorized = authorized.CausedBy(created)

	rec, err := event.ToRecord("payments.events", authorized)
	if err != nil {
		panic(err)
	}
	got, err := event.FromRecord(rec)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(rec.Key), got.Type, got.CorrelationID, got.CausationID == created.ID)
	// Output: order-48271 payment.authorized order-48271 true
}

func ExampleFromRecord_malformed() {
	_, err := event.FromRecord(&kgo.Record{Value: []byte(`{}`)})
	fmt.Println(errors.Is(err, event.ErrMalformed), errors.Is(err, event.ErrMissingHeader))
	fmt.Println(err)
	// Output:
	// true true
	// event: missing header: specversion: no ce_specversion header
}
