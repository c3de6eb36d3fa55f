package consumer

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/lock"
)

// StandardBatch returns the batch-mode counterpart of Standard, for WithBatch: it handles
// several records of one partition in ONE transaction, so that one commit (and its disk
// flush) is shared by the whole batch, which is what lets a consumer go beyond the
// database's transactions-per-second limit.
//
// It resolves cfg exactly as Standard does and runs the same parts: the same decoding,
// router filter (the same errors), span, correlation context, metric and log line per
// record. For a batch it decodes every record, applies the router's filter (ignored
// types are settled, unknown types fail the batch) and upcasts it (Upcast; a failure
// fails the batch), acquires one lease per distinct
// entity of the batch, together (lock.Locker.AcquireAll: one round trip, all or none; an
// entity may repeat within the batch), then in one transaction checks every lease's fence
// in one statement, in entity order (if Fence), sent in one round trip with the
// statement that claims every event's idempotency key (idempotency.Store.ClaimAll, which
// inserts in key order so that concurrent transactions on the same keys cannot
// deadlock), and calls the business handler, in offset order,
// for every event that is not a duplicate (copies of one event within the batch
// included); then it commits, runs the AfterCommit hooks once, and releases the leases
// together. Each record still gets its own consumer span (child of its producer's span),
// correlation context, metric and log line; the batch's own statements are traced under
// its first record's span. A batch whose records are all ignored opens no transaction;
// one whose records are all duplicates rolls its transaction back and runs no hook.
//
// Any failure (a record that does not decode, an unknown type, a lease not obtained, a
// handler error or panic, a failed commit) rolls the whole batch back and returns the
// error: the runtime then hands the same records to the Standard chain one at a time,
// where they are retried and dead-lettered individually. cfg is the Standard config of
// that chain; use the same value for both.
func StandardBatch(cfg StandardConfig) (BatchHandler, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	return c.batch, nil
}

// batch is StandardBatch's handler. It runs, for the records of one batch, the parts
// Standard's middlewares run for one record (see chain); what it adds is that the locks,
// the claims and the commit are shared by the batch.
func (c *chain) batch(ctx context.Context, ms []*Message) (err error) {
	start := time.Now()
	defer func() {
		if err != nil { // the records go to the one-at-a-time chain as they came
			for _, m := range ms {
				m.Outcome, m.lease = "", nil
			}
		}
	}()
	defer recoverPanic(&err)

	// Decode, filter and upcast; work are the records to handle, workAt[j] the index of work[j]
	// in ms.
	work := make([]*Message, 0, len(ms))
	workAt := make([]int, 0, len(ms))
	for i, m := range ms {
		if err := decode(m, c.decode); err != nil {
			return err
		}
		if ok, err := c.filter(m); err != nil {
			return err
		} else if ok {
			work = append(work, m)
			workAt = append(workAt, i)
		}
	}

	// Hold one lease per distinct entity of the batch, acquired together, all or none.
	lctx := ctx
	var held *leases
	if c.locker != nil && len(work) > 0 {
		entities := make([]string, len(work))
		for i, m := range work {
			if entities[i], err = c.lockEntity(ctx, m); err != nil {
				return fmt.Errorf("consumer: the entity to lock: %w", err)
			}
		}
		var cancel context.CancelFunc
		lctx, cancel = context.WithCancel(ctx)
		defer cancel()
		if held, err = acquireLeases(ctx, c.locker, entities, cancel); err != nil {
			return err
		}
		defer held.release(ctx)
		held.assign(work, entities)
	}

	// One span and correlation context per record.
	ctxs := make([]context.Context, len(ms))
	spans := make([]trace.Span, len(ms))
	for i, m := range ms {
		ctxs[i], spans[i] = c.kafka.StartProcess(lctx, m.Record, m.Group)
		ctxs[i] = withCorrelation(ctxs[i], m, c.entityAttr)
	}
	defer func() {
		for i, s := range spans {
			finishSpan(s, ms[i], err)
			s.End()
		}
	}()
	defer recoverPanic(&err) // so that the spans record a handler's panic

	if len(work) > 0 {
		// The transaction's own statements (BEGIN, fences, claims, COMMIT) are traced
		// under the first record's span.
		wctxs := make([]context.Context, len(work))
		for j, i := range workAt {
			wctxs[j] = ctxs[i]
		}
		var leases []*lock.Lease
		if held != nil {
			leases = held.held
		}
		if err = c.tx.run(wctxs[0], work, wctxs, leases); err != nil {
			if held != nil {
				err = held.lost(ctx, err)
			}
			return err
		}
	}
	elapsed := time.Since(start)
	c.ins.recordBatch(ctx, ms)
	for i, m := range ms {
		c.ins.record(ctxs[i], m, nil, elapsed)
		logRecord(ctxs[i], c.logger, m, nil, elapsed)
		m.lease = nil
	}
	return nil
}
