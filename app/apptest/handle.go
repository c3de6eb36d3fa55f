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
	"github.com/choreo-saga/choreo/migrate"
)

// Handle runs h for ev in a transaction of its own, as the Idempotent middleware would,
// and commits when h returns nil. Like the kit's handlers, h runs in a context carrying
// ev, so that what it publishes continues ev's saga.
func Handle(db migrate.Beginner, h consumer.TxHandler, ev event.Event) error {
	ctx := handled.With(context.Background(), ev)
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return h(ctx, tx, ev) })
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
