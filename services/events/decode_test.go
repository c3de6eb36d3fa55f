package events_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
)

func newEvent(t *testing.T, typ, subject string, payload any) event.Event {
	t.Helper()
	ev, err := event.New(events.SourceOrder, typ, subject, payload)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// decodeAny decodes ev as the payload type of want and reports it as an any.
func decodeAny(ev event.Event, want any) (any, error) {
	switch want.(type) {
	case events.OrderCreatedV1:
		return contract.Decode[events.OrderCreatedV1](ev)
	case events.OrderCancelRequestedV1:
		return contract.Decode[events.OrderCancelRequestedV1](ev)
	case events.OrderOutcomeV1:
		return contract.Decode[events.OrderOutcomeV1](ev)
	case events.PaymentV1:
		return contract.Decode[events.PaymentV1](ev)
	case events.StockV1:
		return contract.Decode[events.StockV1](ev)
	}
	panic(fmt.Sprintf("no payload type %T", want))
}

func TestDecodeEveryPayload(t *testing.T) {
	items := []events.Item{{SKU: "sku-1", Qty: 2}}
	for typ, p := range map[string]any{
		events.OrderCreated:         events.OrderCreatedV1{OrderID: "o-1", CustomerID: "c-1", Items: items, Amount: 500},
		events.OrderCancelRequested: events.OrderCancelRequestedV1{OrderID: "o-1", Reason: "changed my mind"},
		events.OrderRejected:        events.OrderOutcomeV1{OrderID: "o-1", Reason: "over limit"},
		events.PaymentAuthorized:    events.PaymentV1{OrderID: "o-1", CustomerID: "c-1", Amount: 500, Items: items},
		events.StockUnavailable:     events.StockV1{OrderID: "o-1", Items: items, Reason: "insufficient stock"},
	} {
		got, err := decodeAny(newEvent(t, typ, "o-1", p), p)
		if err != nil {
			t.Errorf("%s: %v", typ, err)
			continue
		}
		if !reflect.DeepEqual(got, p) {
			t.Errorf("%s: decoded %+v, want %+v", typ, got, p)
		}
	}
}

// Every payload that cannot be handled is malformed input: never retried, dead-lettered
// with reason "malformed", and still matching the sentinel a service wraps it with.
func TestDecodeRejects(t *testing.T) {
	errService := errors.New("svc: invalid event")
	for _, c := range []struct {
		name    string
		subject string
		data    string
		detail  string
	}{
		{"other order", "o-2", `{"order_id":"o-1","customer_id":"c-1","items":[],"amount":5}`, `payload is about "o-1", not the subject "o-2"`},
		{"no order id", "o-1", `{"customer_id":"c-1","items":[],"amount":5}`, `missing property 'order_id'`},
		{"no items", "o-1", `{"order_id":"o-1","customer_id":"c-1","items":null,"amount":5}`, "at /items: got null, want array"},
		{"wrong field type", "o-1", `{"order_id":7,"customer_id":"c-1","items":[],"amount":5}`, "at /order_id: got number, want string"},
		{"not an object", "o-1", `[]`, "got array, want object"},
		{"not JSON", "o-1", `{"order_id":`, "not valid JSON"},
	} {
		ev := newEvent(t, events.OrderCreated, c.subject, struct{}{})
		ev.Data = []byte(c.data)
		p, err := contract.Decode[events.OrderCreatedV1](ev)
		if err == nil {
			t.Errorf("%s: decoded %+v, want an error", c.name, p)
			continue
		}
		if !reflect.DeepEqual(p, events.OrderCreatedV1{}) {
			t.Errorf("%s: returned %+v with the error, want the zero value", c.name, p)
		}
		if !errors.Is(err, event.ErrInvalidPayload) || !errors.Is(err, event.ErrMalformed) {
			t.Errorf("%s: %v does not match event.ErrInvalidPayload and event.ErrMalformed", c.name, err)
		}
		if !strings.HasPrefix(err.Error(), events.OrderCreated+": ") || !strings.Contains(err.Error(), c.detail) {
			t.Errorf("%s: error %q, want the event type and %q", c.name, err, c.detail)
		}
		wrapped := fmt.Errorf("%w: %w", errService, err)
		if !errors.Is(wrapped, errService) || consumer.Retryable(wrapped) || consumer.Reason(wrapped) != consumer.ReasonMalformed {
			t.Errorf("%s: wrapped %v: retryable %v, reason %q; want permanent, %q",
				c.name, wrapped, consumer.Retryable(wrapped), consumer.Reason(wrapped), consumer.ReasonMalformed)
		}
	}
}
