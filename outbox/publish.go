package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/tracing"
)

// row is one claimed outbox row.
type row struct {
	id        int64
	topic     string
	key       string
	headers   []byte
	payload   []byte
	createdAt time.Time
}

// drain publishes rows in id order until the table is empty (as seen by this
// session), ctx is cancelled, or the session fails.
//
// Every round reads the lowest ids still in the table past the floor (f),
// after the previous round's rows were deleted. A row whose transaction
// commits after rows with higher ids were published is therefore simply
// found by a later round, never skipped: the floor only passes ids whose
// transactions have ended.
//
// While a full batch is in flight, or when a wake-up arrives during one, the
// next one is read (and the previous one deleted) in the same round trip,
// excluding the ids in flight by value, so database and broker work overlap.
// It is produced only once the batch in flight is fully acknowledged, and
// discarded if anything in it failed.
func (r *Relay) drain(ctx context.Context, conn *pgx.Conn, f *floor) error {
	var acked []int64 // acknowledged, deleted with the next claim
	var next []row    // read ahead while the previous batch was in flight
	readAhead := false
	attempt := 0
	for {
		if ctx.Err() != nil {
			return r.remove(conn, acked)
		}
		rows := next
		if !readAhead {
			r.lingerBeforeRead(ctx)
			var err error
			if err := r.moveFloor(ctx, conn, f, time.Now()); err != nil {
				return err
			}
			from := f.start(time.Now())
			rows, err = r.claim(ctx, conn, acked, nil, from)
			if err != nil {
				return err
			}
			r.belowFloor(f, from, rows)
			acked = nil
		}
		next, readAhead = nil, false
		if len(rows) == 0 {
			return nil
		}
		claimed := len(rows)
		rows, held, err := r.fit(ctx, conn, rows)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			continue // all dead-lettered: read again
		}

		r.last = sent{rows: claimed, at: time.Now()}
		if held {
			r.last.rows = r.cfg.batchSize // more is waiting: no linger
		}
		batch := r.send(ctx, rows)
		var aheadErr error
		if ctx.Err() == nil && (claimed == r.cfg.batchSize || held || r.wokenDuring(batch)) {
			r.lingerBeforeRead(ctx)
			aheadErr = r.moveFloor(ctx, conn, f, time.Now())
			if aheadErr == nil {
				next, aheadErr = r.claim(ctx, conn, acked, batch.ids, f.after)
			}
			if aheadErr == nil {
				// An empty read-ahead leaves this batch's delete to the
				// next claim, like a batch that was not full.
				acked, readAhead = nil, len(next) > 0
			}
		}
		results, abandoned := batch.wait()
		if abandoned {
			// Shutdown gave up on the acks; those rows stay.
			return r.remove(conn, acked)
		}
		var ok []Published
		var failed []failure
		for i, res := range results {
			if res.err == nil {
				ok = append(ok, res.pub)
			} else {
				failed = append(failed, failure{row: rows[i], err: res.err})
			}
		}
		if err := r.acknowledged(ctx, ok); err != nil {
			return err
		}
		for _, p := range ok {
			acked = append(acked, p.ID)
		}
		if aheadErr != nil || ctx.Err() != nil || len(failed) > 0 {
			// Delete now rather than with the next claim: we are stopping,
			// or failures will be resolved one row at a time.
			if err := r.remove(conn, acked); err != nil {
				return err
			}
			acked = nil
			if aheadErr != nil && ctx.Err() == nil {
				return aheadErr
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if len(failed) == 0 {
			attempt = 0
			continue
		}
		next, readAhead = nil, false // read again from the oldest row
		for _, f := range failed {
			if errors.Is(f.err, kgo.ErrClientClosed) {
				return fmt.Errorf("outbox: produce: %w", f.err)
			}
		}
		for _, f := range failed {
			if errors.Is(f.err, kerr.MessageTooLarge) || errors.Is(f.err, kerr.RecordListTooLarge) {
				r.refreshLimit(f.row.topic) // the topic's limit may have been lowered
			}
		}
		if allPermanent(failed) {
			err := r.resolve(ctx, conn, failed)
			if err == nil {
				attempt = 0
				continue
			}
			if !isBrokerError(err) {
				return err
			}
			failed = []failure{{err: err}}
		}
		delay := r.backoff(attempt)
		attempt++
		r.log.Warn("outbox relay: produce failed, retrying the oldest rows", "err", failed[0].err, "failed", len(failed), "retry_in", delay)
		if !sleep(ctx, delay) {
			return nil
		}
	}
}

// wokenDuring waits until the batch resolves or a wake-up arrives, and
// reports the latter: rows committed while the batch is in flight are then
// read at once instead of after its acks. The wake-up is consumed; the rows
// it announced are visible to the read that follows (Wake comes after
// COMMIT), and anything the read misses is found by the claim after the
// batch, which always happens.
func (r *Relay) wokenDuring(f *inflight) bool {
	select {
	case <-f.done:
		return false
	case <-f.gaveUp:
		return false
	case <-r.wake:
		return true
	}
}

// sent describes the leader's last batch: its rows and when it was sent.
type sent struct {
	rows int
	at   time.Time
}

// lingerBeforeRead waits, before a read, until BatchLinger has passed since the last batch was
// sent if that batch was small (fewer than smallBatch rows, and than the batch size):
// rows that keep coming one commit at a time are then read together, at most one read
// per BatchLinger, and a row waits at most BatchLinger more. A read long after the last
// batch, as at low load, does not wait.
func (r *Relay) lingerBeforeRead(ctx context.Context) {
	if r.cfg.batchLinger <= 0 || r.last.rows >= min(smallBatch, r.cfg.batchSize) {
		return
	}
	if d := time.Until(r.last.at.Add(r.cfg.batchLinger)); d > 0 {
		sleep(ctx, d)
	}
}

type failure struct {
	row row
	err error
}

// brokerError marks errors that came from producing rather than from the
// database session.
type brokerError struct{ err error }

func (e brokerError) Error() string { return e.err.Error() }
func (e brokerError) Unwrap() error { return e.err }

func isBrokerError(err error) bool {
	var be brokerError
	return errors.As(err, &be)
}

// permanent reports whether the broker (or the client, before sending) rejected
// a record in a way no retry can fix.
func permanent(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) ||
		errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) ||
		errors.Is(err, kerr.InvalidTopicException)
}

func allPermanent(fs []failure) bool {
	for _, f := range fs {
		if !permanent(f.err) {
			return false
		}
	}
	return true
}

// resolve retries permanently failed rows one at a time, in id order: a broker
// rejects a whole batch for one oversized record, so its neighbours must get a
// chance on their own. A row that fails permanently again is moved to the
// dead-letter table with the reason; rows behind it carry on.
func (r *Relay) resolve(ctx context.Context, conn *pgx.Conn, failed []failure) error {
	for _, f := range failed {
		results, abandoned := r.publish(ctx, []row{f.row})
		if abandoned || ctx.Err() != nil {
			return nil
		}
		res := results[0]
		switch {
		case res.err == nil:
			if err := r.acknowledged(ctx, []Published{res.pub}); err != nil {
				return err
			}
			if err := r.remove(conn, []int64{f.row.id}); err != nil {
				return err
			}
		case permanent(res.err):
			if err := r.deadLetter(ctx, conn, f.row, res.err); err != nil {
				return err
			}
		default:
			return brokerError{res.err}
		}
	}
	return nil
}

// acknowledged runs the AfterAck hook.
func (r *Relay) acknowledged(ctx context.Context, ok []Published) error {
	if r.cfg.afterAck == nil || len(ok) == 0 {
		return nil
	}
	if err := r.cfg.afterAck(ctx, ok); err != nil {
		return fmt.Errorf("%w: %w", ErrHook, err)
	}
	return nil
}

// claim deletes the previous round's acknowledged rows and reads the next
// batch of ids above after in one round trip (a pipeline on the leader's
// session), skipping the ids in flight.
//
// Cancelling ctx does not interrupt the statements (pgx would have to close
// the session, and with it the chance to delete acknowledged rows on
// shutdown); queryTimeout bounds them.
func (r *Relay) claim(ctx context.Context, conn *pgx.Conn, acked, inflight []int64, after int64) ([]row, error) {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), queryTimeout)
	defer cancel()
	b := &pgx.Batch{}
	if len(acked) > 0 {
		b.Queue("DELETE FROM "+r.names.table+" WHERE id = ANY($1)", acked)
	}
	if len(inflight) == 0 {
		b.Queue("SELECT id, topic, key, headers, payload, created_at FROM "+r.names.table+
			" WHERE id > $2 ORDER BY id LIMIT $1", r.cfg.batchSize, after)
	} else {
		// NOT IN over a subquery is evaluated with a hash table.
		b.Queue("SELECT id, topic, key, headers, payload, created_at FROM "+r.names.table+
			" WHERE id > $2 AND id NOT IN (SELECT unnest($3::bigint[])) ORDER BY id LIMIT $1", r.cfg.batchSize, after, inflight)
	}
	br := conn.SendBatch(qctx, b)
	defer br.Close()
	if len(acked) > 0 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("outbox: delete published rows: %w", err)
		}
	}
	rs, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	// Grow with the rows actually read: at a steady trickle most reads
	// return one or two rows, and a batch-sized allocation per read
	// (112 kB at the default size) made the garbage collector run several
	// times a second, each time taking one of two cores for 10–20 ms.
	var rows []row
	for rs.Next() {
		var x row
		if err := rs.Scan(&x.id, &x.topic, &x.key, &x.headers, &x.payload, &x.createdAt); err != nil {
			rs.Close()
			return nil, fmt.Errorf("outbox: claim: %w", err)
		}
		rows = append(rows, x)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	return rows, nil
}

// remove deletes acknowledged rows. It does not use the relay's context: rows
// the broker has acknowledged are deleted even during shutdown, so a restart
// does not republish them.
func (r *Relay) remove(conn *pgx.Conn, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, "DELETE FROM "+r.names.table+" WHERE id = ANY($1)", ids); err != nil {
		return fmt.Errorf("outbox: delete published rows: %w", err)
	}
	return nil
}

// deadLetter moves a row to the dead-letter table with the reason, in one statement.
func (r *Relay) deadLetter(ctx context.Context, conn *pgx.Conn, x row, cause error) error {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), queryTimeout)
	defer cancel()
	_, err := conn.Exec(qctx, "WITH moved AS (DELETE FROM "+r.names.table+" WHERE id = $1 "+
		"RETURNING id, topic, key, headers, payload, created_at) "+
		"INSERT INTO "+r.names.dead+" (id, topic, key, headers, payload, created_at, reason) "+
		"SELECT id, topic, key, headers, payload, created_at, $2 FROM moved "+
		"ON CONFLICT (id) DO UPDATE SET reason = EXCLUDED.reason, failed_at = clock_timestamp()",
		x.id, cause.Error())
	if err != nil {
		return fmt.Errorf("outbox: dead-letter row %d: %w", x.id, err)
	}
	r.metrics.deadLettered.Add(ctx, 1, r.metrics.topicAttrs(x.topic))
	r.log.Error("outbox relay: a row can never be published (refused by the broker or the client, or too large for its topic), moved it to the dead-letter table",
		"id", x.id, "topic", x.topic, "key", x.key, "dead_letter_table", r.names.dead, "reason", cause)
	return nil
}

type result struct {
	pub Published
	err error
}

// publish produces rows and waits for every ack; see send.
func (r *Relay) publish(ctx context.Context, rows []row) (results []result, abandoned bool) {
	return r.send(ctx, rows).wait()
}

// inflight is a batch being produced.
type inflight struct {
	ids     []int64
	mu      sync.Mutex // guards results against a callback that outlives an abandoned batch
	results []result
	done    chan struct{} // every record resolved
	gaveUp  chan struct{} // shutdown stopped waiting
	cleanup []func()
	rows    int
	log     func(msg string, args ...any)
}

// send produces rows (in order). Each record gets a producer span whose
// parent is the trace context stored with the row; the record carries that
// span's context onward.
//
// When ctx is cancelled, the batch still gets up to ShutdownTimeout to be
// acknowledged; then the records not yet sent are cancelled and those in
// flight (which an idempotent producer cannot cancel safely) get one more
// second. If they still have not resolved, wait reports the batch abandoned:
// the caller must leave its rows alone.
func (r *Relay) send(ctx context.Context, rows []row) *inflight {
	f := &inflight{
		ids:     make([]int64, len(rows)),
		results: make([]result, len(rows)),
		done:    make(chan struct{}),
		gaveUp:  make(chan struct{}),
		rows:    len(rows),
		log:     r.log.Warn,
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(r.cfg.shutdownTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-pctx.Done():
			return
		}
		t.Reset(time.Second)
		select {
		case <-t.C:
			close(f.gaveUp)
		case <-pctx.Done():
		}
	})
	f.cleanup = append(f.cleanup, func() { stop() }, cancel)

	var wg sync.WaitGroup
	wg.Add(len(rows))
	for i := range rows {
		x := rows[i]
		f.ids[i] = x.id
		rec, span, err := r.record(ctx, x)
		if err != nil {
			// Undecodable headers never improve: dead-letter the row.
			f.results[i].err = fmt.Errorf("%w: %w", kerr.InvalidRecord, err)
			wg.Done()
			continue
		}
		r.client.Produce(pctx, rec, func(rec *kgo.Record, err error) {
			now := time.Now()
			tracing.EndSend(span, rec, err)
			if err == nil {
				r.metrics.published.Add(context.Background(), 1, r.metrics.topicAttrs(x.topic))
				r.metrics.latency.Record(context.Background(), now.Sub(x.createdAt).Seconds(), r.metrics.topicAttrs(x.topic))
			} else {
				r.metrics.errors.Add(context.Background(), 1, r.metrics.topicAttrs(x.topic))
			}
			f.mu.Lock()
			f.results[i] = result{err: err, pub: Published{ID: x.id, Record: rec, CreatedAt: x.createdAt, AckedAt: now}}
			f.mu.Unlock()
			wg.Done()
		})
	}
	if r.linger {
		// The relay waits for the whole batch, so lingering for more records
		// only adds latency: flush until the batch is done.
		fctx, fcancel := context.WithCancel(pctx)
		f.cleanup = append(f.cleanup, fcancel)
		go func() { _ = r.client.Flush(fctx) }()
	}
	go func() {
		wg.Wait()
		close(f.done)
	}()
	return f
}

// wait blocks until every record of the batch resolved, or shutdown gave up.
func (f *inflight) wait() (results []result, abandoned bool) {
	defer func() {
		for _, c := range f.cleanup {
			c()
		}
	}()
	select {
	case <-f.done:
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.results, false
	case <-f.gaveUp:
		f.log("outbox relay: shutdown abandoned a batch still in flight; its rows stay and will be republished", "rows", f.rows)
		return nil, true
	}
}

// record rebuilds the Kafka record of a row and starts its producer span,
// whose parent is the trace context stored with the row (not whatever ctx
// carries). The record then carries the producer span's context onward.
func (r *Relay) record(ctx context.Context, x row) (*kgo.Record, trace.Span, error) {
	rec, err := r.build(x)
	if err != nil {
		return nil, nil, err
	}
	parent := tracing.Extract(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), rec)
	if cid := (tracing.RecordCarrier{Record: rec}).Get(event.HeaderCorrelationID); cid != "" {
		parent = tracing.WithCorrelationID(parent, cid)
	}
	if r.cfg.entityAttr != "" && x.key != "" {
		parent = tracing.WithEntity(parent, r.cfg.entityAttr, x.key)
	}
	_, span := r.kafka.StartSend(parent, rec)
	span.SetAttributes(attribute.Int64("choreo.outbox.id", x.id))
	return rec, span, nil
}

// build rebuilds the Kafka record of a row, without trace context of its own.
func (r *Relay) build(x row) (*kgo.Record, error) {
	hs, err := decodeHeaders(x.headers)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: x.topic, Key: []byte(x.key), Value: x.payload, Headers: hs}, nil
}
