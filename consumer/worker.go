package consumer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/internal/backoff"
)

// errStopping is returned by middlewares that abandon a record because its partition
// worker is stopping (revoke, loss or shutdown). Such a record is left unsettled for the
// partition's next owner and is never dead-lettered.
var errStopping = errors.New("consumer: partition worker stopping")

type stopKey struct{}

// stopSignal returns the channel closed when the worker handling ctx's message stops, or
// nil outside the runtime.
func stopSignal(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(stopKey{}).(chan struct{})
	return ch
}

// abandoned reports whether err means "the runtime is taking the record away", as opposed
// to a failure of the record itself.
func abandoned(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, errStopping)
}

// worker handles the records of one partition, one at a time, in offset order.
type worker struct {
	c  *Consumer
	cl *kgo.Client
	tp topicPartition

	ctx      context.Context // handlers' context; cancelled when the drain grace ends
	cancel   context.CancelFunc
	stopping chan struct{} // closed when the worker must take no further record
	stopOnce sync.Once
	done     chan struct{}
	wake     chan struct{}

	mu     sync.Mutex
	queue  []*kgo.Record
	paused bool

	hwm      atomic.Int64 // high watermark last seen in a fetch; -1 unknown
	next     atomic.Int64 // offset after the last settled record; -1 unknown
	progress atomic.Int64 // when the partition last moved or was caught up (Unix ns)

	hmu          sync.Mutex // guards the outage and stall state below
	outageSince  time.Time  // zero: not in an outage
	outageOffset int64      // the record the outage holds up
	stallSince   time.Time  // zero: no stall reported (see checkStall)
}

func newWorker(c *Consumer, cl *kgo.Client, tp topicPartition) *worker {
	w := &worker{
		c:        c,
		cl:       cl,
		tp:       tp,
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
	}
	w.ctx, w.cancel = context.WithCancel(withPartitionRun(context.WithValue(c.baseCtx, stopKey{}, w.stopping)))
	w.hwm.Store(-1)
	w.next.Store(-1)
	w.progress.Store(time.Now().UnixNano())
	return w
}

// push appends fetched records and pauses the partition when the buffer is full. Called
// from the poll loop only.
func (w *worker) push(recs []*kgo.Record, hwm int64) {
	if hwm >= 0 {
		if old, next := w.hwm.Load(), w.next.Load(); old < 0 || next < 0 || next >= old {
			w.progress.Store(time.Now().UnixNano()) // caught up until now: a stall starts here at the earliest
		}
		w.hwm.Store(hwm)
	}
	if len(recs) == 0 {
		return
	}
	w.next.CompareAndSwap(-1, recs[0].Offset)
	w.mu.Lock()
	w.queue = append(w.queue, recs...)
	if !w.paused && len(w.queue) >= w.c.cfg.maxBuffered {
		w.paused = true
		w.cl.PauseFetchPartitions(map[string][]int32{w.tp.topic: {w.tp.partition}})
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take returns up to n buffered records, waiting for at least one, or false once the
// worker is stopping. It resumes fetching once the buffer has drained to half its bound.
func (w *worker) take(n int) ([]*kgo.Record, bool) {
	for {
		select {
		case <-w.stopping:
			return nil, false
		default:
		}
		w.mu.Lock()
		if len(w.queue) > 0 {
			n = min(n, len(w.queue))
			rs := make([]*kgo.Record, n)
			copy(rs, w.queue)
			clear(w.queue[:n])
			w.queue = w.queue[n:]
			if len(w.queue) == 0 {
				w.queue = nil
			}
			if w.paused && len(w.queue) <= w.c.cfg.maxBuffered/2 {
				w.paused = false
				w.cl.ResumeFetchPartitions(map[string][]int32{w.tp.topic: {w.tp.partition}})
			}
			w.mu.Unlock()
			return rs, true
		}
		w.mu.Unlock()
		select {
		case <-w.wake:
		case <-w.stopping:
			return nil, false
		}
	}
}

func (w *worker) run() {
	defer close(w.done)
	defer w.cancel()
	defer w.released()
	n := max(w.c.cfg.batchMax, 1)
	for {
		rs, ok := w.take(n)
		if !ok {
			return
		}
		if len(rs) > 1 && w.handleBatch(rs) {
			w.settled(rs[len(rs)-1])
			continue
		}
		for _, r := range rs {
			if w.isStopping() || !w.handle(r) {
				return
			}
			w.settled(r)
		}
	}
}

func (w *worker) isStopping() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

// settled marks r, and every earlier record of the partition, for commit.
func (w *worker) settled(r *kgo.Record) {
	w.cl.MarkCommitRecords(r)
	w.next.Store(r.Offset + 1)
	w.progress.Store(time.Now().UnixNano())
}

// handleBatch hands rs to the batch handler and reports whether it settled them all.
func (w *worker) handleBatch(rs []*kgo.Record) bool {
	ms := make([]*Message, len(rs))
	for i, r := range rs {
		ms[i] = &Message{Record: r, Group: w.c.group, deadLetterTopic: w.c.cfg.dlqTopic}
	}
	err := w.c.cfg.batch(w.ctx, ms)
	if err == nil {
		return true
	}
	if !abandoned(w.ctx, err) {
		w.c.cfg.logger.LogAttrs(w.ctx, slog.LevelDebug, "consumer: batch failed; handling its records one at a time",
			slog.String("group", w.c.group), slog.String("topic", w.tp.topic), slog.Int("partition", int(w.tp.partition)),
			slog.Int64("first_offset", rs[0].Offset), slog.Int("records", len(rs)), slog.Any("error", err))
	}
	return false
}

// handle runs the handler until it settles r, and reports false if the worker stopped
// first (r is then left for the partition's next owner). A handler failure is handed
// back after the redelivery backoff; an outage (IsOutage) after the outage backoff,
// without limit, with one log line when the partition's outage starts and one when it
// ends.
func (w *worker) handle(r *kgo.Record) bool {
	var failures, outages int
	for {
		err := w.c.h(w.ctx, &Message{Record: r, Group: w.c.group, deadLetterTopic: w.c.cfg.dlqTopic})
		if err == nil {
			w.outageOver(r)
			return true
		}
		if abandoned(w.ctx, err) || w.isStopping() {
			return false
		}
		var delay time.Duration
		if IsOutage(err) {
			outages++
			delay = w.c.cfg.outage.Delay(outages)
			w.outageBegins(r, err, delay)
		} else {
			w.outageOver(r) // the dependencies answered; the record itself failed
			outages = 0
			failures++
			delay = w.c.cfg.redelivery.Delay(failures)
			w.c.cfg.logger.LogAttrs(w.ctx, slog.LevelError, "consumer: handler failed; record will be handled again",
				slog.String("group", w.c.group), slog.String("topic", r.Topic),
				slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset),
				slog.Duration("retry_in", delay), slog.Any("error", err))
		}
		if !backoff.Sleep(w.ctx, delay, w.stopping) {
			return false
		}
	}
}

// outageBegins records that r failed with an outage, logging the start of the
// partition's outage if it was not in one.
func (w *worker) outageBegins(r *kgo.Record, err error, delay time.Duration) {
	w.hmu.Lock()
	defer w.hmu.Unlock()
	if !w.outageSince.IsZero() {
		return
	}
	w.outageSince, w.outageOffset = time.Now(), r.Offset
	w.c.cfg.logger.LogAttrs(w.ctx, slog.LevelWarn, "consumer: outage: partition paused; retrying its record until the dependencies are back",
		slog.String("group", w.c.group), slog.String("topic", r.Topic),
		slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset),
		slog.Duration("retry_in", delay), slog.Any("error", err))
}

// outageOver ends the partition's outage, if any, logging its duration.
func (w *worker) outageOver(r *kgo.Record) {
	w.hmu.Lock()
	defer w.hmu.Unlock()
	if w.outageSince.IsZero() {
		return
	}
	w.c.cfg.logger.LogAttrs(w.ctx, slog.LevelInfo, "consumer: outage over: partition resumed",
		slog.String("group", w.c.group), slog.String("topic", r.Topic),
		slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset),
		slog.Duration("duration", time.Since(w.outageSince)))
	w.outageSince = time.Time{}
}

// released logs the end of an outage or stall cut short because the worker stopped
// (revoke, loss, shutdown).
func (w *worker) released() {
	w.hmu.Lock()
	defer w.hmu.Unlock()
	if !w.outageSince.IsZero() {
		w.c.cfg.logger.LogAttrs(w.c.baseCtx, slog.LevelInfo, "consumer: partition released during an outage",
			slog.String("group", w.c.group), slog.String("topic", w.tp.topic),
			slog.Int("partition", int(w.tp.partition)), slog.Int64("offset", w.outageOffset),
			slog.Duration("duration", time.Since(w.outageSince)))
	}
	if !w.stallSince.IsZero() {
		w.c.cfg.logger.LogAttrs(w.c.baseCtx, slog.LevelInfo, "consumer: stalled partition released",
			slog.String("group", w.c.group), slog.String("topic", w.tp.topic),
			slog.Int("partition", int(w.tp.partition)), slog.Int64("offset", w.next.Load()),
			slog.Duration("stalled_for", time.Since(w.stallSince)))
	}
}

// inOutage reports since when the partition has been in an outage and at which offset.
func (w *worker) inOutage() (time.Time, int64, bool) {
	w.hmu.Lock()
	defer w.hmu.Unlock()
	return w.outageSince, w.outageOffset, !w.outageSince.IsZero()
}

// stalled reports whether the partition has lag and has made no progress for the stall
// timeout, and for how long it has made none.
func (w *worker) stalled(now time.Time) (time.Duration, bool) {
	l, ok := w.lag()
	if !ok || l == 0 {
		return 0, false
	}
	idle := now.Sub(time.Unix(0, w.progress.Load()))
	return idle, idle >= w.c.cfg.stallTimeout
}

// checkStall logs, once, that the partition stalled and, once, that it moves again.
func (w *worker) checkStall(now time.Time) {
	idle, stalled := w.stalled(now)
	w.hmu.Lock()
	defer w.hmu.Unlock()
	switch {
	case stalled && w.stallSince.IsZero():
		w.stallSince = now.Add(-idle)
		l, _ := w.lag()
		w.c.cfg.logger.LogAttrs(w.c.baseCtx, slog.LevelError, "consumer: partition stalled: it has lag and made no progress",
			slog.String("group", w.c.group), slog.String("topic", w.tp.topic),
			slog.Int("partition", int(w.tp.partition)), slog.Int64("offset", w.next.Load()),
			slog.Int64("lag", l), slog.Duration("no_progress_for", idle), slog.Bool("outage", !w.outageSince.IsZero()))
	case !stalled && !w.stallSince.IsZero():
		w.c.cfg.logger.LogAttrs(w.c.baseCtx, slog.LevelInfo, "consumer: stalled partition moving again",
			slog.String("group", w.c.group), slog.String("topic", w.tp.topic),
			slog.Int("partition", int(w.tp.partition)), slog.Int64("offset", w.next.Load()),
			slog.Duration("stalled_for", now.Sub(w.stallSince)))
		w.stallSince = time.Time{}
	}
}

// stop makes the worker take no further record and cancels the handler's context after
// grace (at once if grace is 0). It clears the partition's pause so that a later
// assignment of the same partition fetches normally.
func (w *worker) stop(grace time.Duration) {
	w.stopOnce.Do(func() {
		close(w.stopping)
		if grace <= 0 {
			w.cancel()
		} else {
			t := time.AfterFunc(grace, w.cancel)
			go func() { <-w.done; t.Stop() }()
		}
		w.mu.Lock()
		if w.paused {
			w.paused = false
			w.cl.ResumeFetchPartitions(map[string][]int32{w.tp.topic: {w.tp.partition}})
		}
		w.queue = nil
		w.mu.Unlock()
	})
}

func (w *worker) lag() (int64, bool) {
	hwm, next := w.hwm.Load(), w.next.Load()
	if hwm < 0 || next < 0 {
		return 0, false
	}
	return max(hwm-next, 0), true
}

func (w *worker) buffered() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}
