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

// cancelled is the payload of shipment.cancelled.
type cancelled struct {
	OrderID string `json:"order_id"`
}

// shipmentCancelled is the producer of shipment.cancelled (declared in guideService).
var shipmentCancelled = app.Producer[cancelled]{Source: "shipping", Topic: "shipping.events", Type: "shipment.cancelled", Version: 1}

// cancelRoute registers the guide's HTTP route on svc.
func cancelRoute(svc *app.App) {
	svc.Produces(shipmentCancelled)
	// snippet:start http-route
	svc.HandleHTTPFunc("POST /shipments/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx, err := svc.Pool.Begin(ctx)
		if err != nil {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		defer tx.Rollback(ctx)
		id := r.PathValue("id")
		err = shipmentCancelled.Publish(ctx, tx, svc, id, cancelled{OrderID: id})
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
	app.On(svc, "orders.events", "order.cancelled", 1, func(ctx context.Context, tx pgx.Tx, ev event.Event, in cancelled) error {
		tag, err := tx.Exec(ctx, `DELETE FROM shipments WHERE order_id = $1`, in.OrderID)
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

// created is the part of order.created the guide's credit handler reads.
type created struct {
	CustomerID string `json:"customer_id"`
}

// reserveCredit is the handler of the guide's section on locking another entity.
func reserveCredit(context.Context, pgx.Tx, event.Event, created) error { return nil }

// lockOnCustomer registers reserveCredit locking the order's customer.
func lockOnCustomer(svc *app.App) {
	// snippet:start lock-on
	customerOf := func(ctx context.Context, ev event.Event) (string, error) {
		var order struct {
			CustomerID string `json:"customer_id"`
		}
		if err := ev.DecodeData(&order); err != nil {
			return "", consumer.Permanent(err) // dead-lettered at once
		}
		return order.CustomerID, nil
	}
	app.On(svc, "orders.events", "order.created", 1, reserveCredit, app.LockOn(customerOf))
	// snippet:end lock-on
}
