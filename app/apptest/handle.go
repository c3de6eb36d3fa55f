package apptest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/app/internal/handled"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/migrate"
)

// HandleScope is the idempotency scope Handle claims event ids under (the kit's
// handlers claim under "<group>/<handler name>").
const HandleScope = "apptest/handler"

// Handle runs h for ev as the kit's idempotent step does: in a transaction of its own it
// claims ev's id under HandleScope with the hash of ev's type and payload
// (idempotency.Store.Claim on the default table, which NewDB creates), runs h unless the
// claim finds ev already handled, and commits when h returns nil. A second Handle of the
// same event is therefore skipped, and one with the same id and another payload returns
// idempotency.ErrKeyReused. Like the kit's handlers, h runs in a context carrying ev, so
// that what it publishes continues ev's saga.
func Handle(db migrate.Beginner, h consumer.TxHandler, ev event.Event) error {
	store, err := idempotency.NewStore()
	if err != nil {
		return err
	}
	ctx := handled.With(context.Background(), ev)
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		c, err := store.Claim(ctx, tx, HandleScope, ev.ID, idempotency.Hash([]byte(ev.Type), ev.Data))
		if err != nil || c.Duplicate {
			return err
		}
		return h(ctx, tx, ev)
	})
}

// MustHandle is Handle, failing t on an error.
func MustHandle(t testing.TB, db migrate.Beginner, h consumer.TxHandler, ev event.Event) {
	t.Helper()
	if err := Handle(db, h, ev); err != nil {
		t.Fatalf("handle %s: %v", ev.Type, err)
	}
}

// HandleConcurrently handles every event of evs at the same time, each in a goroutine
// and a transaction of its own (see Handle), as consumers on several partitions or
// instances would, and fails t on an error once all have returned.
func HandleConcurrently(t testing.TB, db migrate.Beginner, h consumer.TxHandler, evs ...event.Event) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(evs))
	for i, ev := range evs {
		wg.Go(func() { errs[i] = Handle(db, h, ev) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("handle concurrently: %v", err)
	}
}

// DecodeData returns the payload of ev decoded into a T, failing t on an error.
func DecodeData[T any](t testing.TB, ev event.Event) T {
	t.Helper()
	var p T
	if err := ev.DecodeData(&p); err != nil {
		t.Fatalf("decode %s: %v", ev.Type, err)
	}
	return p
}
