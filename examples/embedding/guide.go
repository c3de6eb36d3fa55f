package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
)

// The code blocks of docs/embedding.md's reference sections (see doc.go).
// TestGuideBlocks runs the first two on the quick start's service.

// cancelRoute registers the guide's HTTP route on svc.
func cancelRoute(svc *app.App) {
	// snippet:start http-route
	svc.HandleHTTPFunc("POST /shipments/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx, err := svc.Pool.Begin(ctx)
		if err != nil {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		defer tx.Rollback(ctx)
		ev, err := event.New("shipping", "shipment.cancelled", r.PathValue("id"), map[string]string{})
		if err == nil {
			err = svc.Publish(ctx, tx, "shipping.events", ev)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	// snippet:end http-route
}

// cancelShipments registers the guide's handler of order.cancelled on svc.
func cancelShipments(svc *app.App) {
	// snippet:start reject
	svc.Handle("orders.events", "order.cancelled", func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		tag, err := tx.Exec(ctx, `DELETE FROM shipments WHERE order_id = $1`, ev.Subject)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return consumer.Reject("no_shipment", fmt.Errorf("order %s has no shipment", ev.Subject))
		}
		consumer.AfterCommit(ctx, tx, func() { log.Printf("shipment of %s cancelled", ev.Subject) })
		return nil
	})
	// snippet:end reject
}

// shortRedoWindow builds a service whose crash redo window is 50 ms.
func shortRedoWindow(ctx context.Context) (*app.App, error) {
	// snippet:start redo-window
	svc, err := app.New(ctx, "shipping",
		app.WithConsumerOptions(consumer.WithCommitInterval(50*time.Millisecond)))
	// snippet:end redo-window
	return svc, err
}

// reserveCredit is the handler of the guide's section on locking another entity.
func reserveCredit(context.Context, pgx.Tx, event.Event) error { return nil }

// lockOnCustomer registers reserveCredit locking the order's customer.
func lockOnCustomer(svc *app.App) {
	// snippet:start lock-on
	customerOf := func(ev event.Event) string {
		var order struct {
			CustomerID string `json:"customer_id"`
		}
		_ = ev.DecodeData(&order) // a malformed payload fails in the handler
		return order.CustomerID
	}
	svc.Handle("orders.events", "order.created", reserveCredit, app.LockOn(customerOf))
	// snippet:end lock-on
}
