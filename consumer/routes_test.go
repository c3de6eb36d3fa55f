package consumer

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/event"
)

func TestRouterRoutes(t *testing.T) {
	h := func(context.Context, pgx.Tx, event.Event) error { return nil }
	r := NewRouter().HandleOn("orders", "order.confirmed", h).Handle("payment.authorized", h).Ignore("order.created")
	got := r.Routes()
	want := []Route{{Type: "order.confirmed", Topic: "orders"}, {Type: "payment.authorized"}}
	if !slices.Equal(got, want) {
		t.Errorf("Routes() = %+v, want %+v (ignored types are not routes)", got, want)
	}
}
