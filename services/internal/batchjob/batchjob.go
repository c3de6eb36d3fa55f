// Package batchjob runs the demo services' periodic jobs: inventory's reservation
// sweeper and reconciliation, payment's reconciliation, and the order service's deadline
// sweep and pending count.
//
// [Repeat] runs a round periodically, paced by how long the round takes ([Paced]), so
// that a round that slows down (a snapshot held elsewhere keeps the versions its index
// walks) takes at most a tenth of a connection. [Run] adds logging for jobs that work in
// batches over rows that several instances share. Each batch claims at most a batch size
// of rows with FOR UPDATE SKIP LOCKED, so instances running the same job at once take
// different rows and never wait on a handler that holds one; [Drain] repeats batches
// until one comes back short. [Reconciliation] is the reconciliations' batch: one
// transaction claims the rows and settles those that need nothing, then each of the
// others is corrected in a transaction of its own, so that a correction never holds the
// locks of several orders.
//
// It is shared by the services only, so it lives under services/, not in the library.
package batchjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
)

// Batch handles one batch: it claims at most the job's batch size of rows and returns
// how many it claimed and how many actions it took on them (rows released, corrected or
// reported).
type Batch func(ctx context.Context) (claimed, acted int, err error)

// Drain runs batch until a batch claims fewer than size rows or fails. It returns the
// actions of all the batches, with the error that stopped it.
func Drain(ctx context.Context, size int, batch Batch) (int, error) {
	total := 0
	for {
		claimed, acted, err := batch(ctx)
		total += acted
		if err != nil || claimed < size {
			return total, err
		}
	}
}

// Logs says what [Run] logs: a failed round at warn level, with message Failed and the
// error as attribute "error", and, when Done is not empty, a round that acted on
// something at info level, with message Done and the count as attribute "count".
type Logs struct {
	Logger       *slog.Logger
	Failed, Done string
}

// paceFactor bounds the share of time a periodic round may take: after a round that took
// d, the next starts at least paceFactor×d later, so the round keeps at most
// 1/(paceFactor+1) of one connection busy.
//
// The rounds read partial indexes of the rows still to do (in-flight orders, unchecked
// rows, unexpired reservations), and those hold an entry for every version of such a row
// that vacuum has not removed. A snapshot held elsewhere on the database (a long report,
// a stuck transaction) keeps every version, so each round walks every row written since
// the snapshot was taken: 0.3 ms became 340 ms after ten minutes at 157 orders/s, and at
// a fixed period the order service's three periodic reads alone took more than a core of
// a two-core machine (docs/benchmarks.md, "held snapshot"). Paced, they slow down
// instead.
const paceFactor = 9

// Paced returns how long to wait after a round that took took: every, or paceFactor×took
// when that is longer.
func Paced(every, took time.Duration) time.Duration {
	return max(every, paceFactor*took)
}

// Repeat calls round at once and then again after every pause of Paced(every, the last
// round's duration), until ctx is cancelled; no round starts once ctx is done.
func Repeat(ctx context.Context, every time.Duration, round func(context.Context)) {
	for ctx.Err() == nil {
		start := time.Now()
		round(ctx)
		pause := time.NewTimer(Paced(every, time.Since(start)))
		select {
		case <-ctx.Done():
			pause.Stop()
			return
		case <-pause.C:
		}
	}
}

// Run calls round at once and then about every interval (see [Repeat]) until ctx is
// cancelled, then returns nil. It logs each round's result as logs says, except the error
// of a round that ctx's cancellation cut short (no failure: the service is stopping; what
// the round did is still logged); a failed round is retried at the next one.
func Run(ctx context.Context, interval time.Duration, round func(context.Context) (int, error), logs Logs) error {
	Repeat(ctx, interval, func(ctx context.Context) {
		n, err := round(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			logs.Logger.WarnContext(ctx, logs.Failed, slog.Any("error", err))
		case n > 0 && logs.Done != "":
			logs.Logger.InfoContext(ctx, logs.Done, slog.Int("count", n))
		}
	})
	return nil
}

// Claimed is what the claim transaction of a reconciliation batch found.
type Claimed struct {
	// Rows is how many rows the claim locked and looked at.
	Rows int
	// Fine are the orders that need nothing: they are marked checked in the claim
	// transaction.
	Fine []string
	// Todo are the orders to correct, in this order, each in a transaction of its own.
	Todo []string
	// Committed, when not nil, runs once the claim transaction has committed and before
	// the corrections; it returns how many actions it took. (Inventory reports its
	// orphans there, so that a claim rolled back reports nothing.)
	Committed func(ctx context.Context) int
}

// Sort reads the rows of a claim query that selects (order id, whether the order needs a
// correction) into Claimed: Rows counts them, Todo holds those that need a correction,
// Fine the others.
func Sort(rows pgx.Rows) (Claimed, error) {
	var (
		c    Claimed
		id   string
		need bool
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &need}, func() error {
		c.Rows++
		if need {
			c.Todo = append(c.Todo, id)
		} else {
			c.Fine = append(c.Fine, id)
		}
		return nil
	})
	return c, err
}

// Reconciliation is a job that checks the rows of a table once each and corrects the
// orders that need it. The table has one row per order, keyed by order_id, and a boolean
// column checked; a row stays unchecked until the order needs nothing or is corrected.
// Its fields are set once, before the first call.
type Reconciliation struct {
	// DB is where the transactions begin.
	DB migrate.Beginner
	// Outbox begins the corrections' transactions (see [outbox.Outbox.InTx]), so that
	// the relay is woken once a correction's events are committed.
	Outbox *outbox.Outbox
	// Table is the table of checked rows (a constant of the service, not user input).
	Table string
	// Size is the most rows one claim takes.
	Size int
	// Name prefixes errors: "Name: …" for a failed claim, "Name order ID: …" for a
	// failed correction.
	Name string
	// Claim runs in the claim transaction. It locks at most limit rows with FOR UPDATE
	// SKIP LOCKED and sorts the unchecked ones into Claimed.Fine and Claimed.Todo.
	Claim func(ctx context.Context, tx pgx.Tx, limit int) (Claimed, error)
	// Correct corrects one order, in the correction's transaction, once its row of
	// Table is locked and seen still unchecked; the row is marked checked after it. It
	// returns whether it changed anything (not when the order needs nothing after all).
	Correct func(ctx context.Context, tx pgx.Tx, order string) (bool, error)
}

// Once checks every unchecked row, batch by batch (see [Drain]), and returns how many
// corrections and other actions it made.
func (r *Reconciliation) Once(ctx context.Context) (int, error) {
	return Drain(ctx, r.Size, r.batch)
}

// batch runs one claim transaction, then Claimed.Committed, then the corrections in
// order, stopping at the first that fails. It returns how many rows it claimed and how
// many actions it took.
func (r *Reconciliation) batch(ctx context.Context) (claimed, acted int, err error) {
	var c Claimed
	err = pgx.BeginFunc(ctx, r.DB, func(tx pgx.Tx) error {
		var err error
		if c, err = r.Claim(ctx, tx, r.Size); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE `+r.Table+` SET checked = true WHERE order_id = ANY($1)`, c.Fine)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", r.Name, err)
	}
	if c.Committed != nil {
		acted += c.Committed(ctx)
	}
	for _, id := range c.Todo {
		ok, err := r.correct(ctx, id)
		if err != nil {
			return c.Rows, acted, fmt.Errorf("%s order %s: %w", r.Name, id, err)
		}
		if ok {
			acted++
		}
	}
	return c.Rows, acted, nil
}

// correct locks the order's row in a transaction of its own and, if it is still
// unchecked (another instance may have corrected it meanwhile), corrects the order and
// marks the row checked.
func (r *Reconciliation) correct(ctx context.Context, order string) (bool, error) {
	fixed := false
	err := r.Outbox.InTx(ctx, r.DB, func(ctx context.Context, tx pgx.Tx) error {
		fixed = false
		var unchecked bool
		err := tx.QueryRow(ctx, `SELECT true FROM `+r.Table+` WHERE order_id = $1 AND NOT checked FOR UPDATE`, order).Scan(&unchecked)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // another instance corrected it
		}
		if err != nil {
			return err
		}
		if fixed, err = r.Correct(ctx, tx, order); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE `+r.Table+` SET checked = true WHERE order_id = $1`, order)
		return err
	})
	return fixed, err
}
