package consumer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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

	hwm  atomic.Int64 // high watermark last seen in a fetch; -1 unknown
	next atomic.Int64 // offset after the last settled record; -1 unknown
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
	w.ctx, w.cancel = context.WithCancel(context.WithValue(c.baseCtx, stopKey{}, w.stopping))
	w.hwm.Store(-1)
	w.next.Store(-1)
	return w
}

// push appends fetched records and pauses the partition when the buffer is full. Called
// from the poll loop only.
func (w *worker) push(recs []*kgo.Record, hwm int64) {
	if hwm >= 0 {
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
}

// handleBatch hands rs to the batch handler and reports whether it settled them all.
func (w *worker) handleBatch(rs []*kgo.Record) bool {
	ms := make([]*Message, len(rs))
	for i, r := range rs {
		ms[i] = &Message{Record: r, Group: w.c.group}
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
// first (r is then left for the partition's next owner).
func (w *worker) handle(r *kgo.Record) bool {
	delay := w.c.cfg.redeliveryMin
	for {
		err := w.c.h(w.ctx, &Message{Record: r, Group: w.c.group})
		if err == nil {
			return true
		}
		if abandoned(w.ctx, err) {
			return false
		}
		select {
		case <-w.stopping:
			return false
		default:
		}
		w.c.cfg.logger.LogAttrs(w.ctx, slog.LevelError, "consumer: handler failed; record will be handled again",
			slog.String("group", w.c.group), slog.String("topic", r.Topic),
			slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset),
			slog.Duration("retry_in", delay), slog.Any("error", err))
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-w.stopping:
			t.Stop()
			return false
		}
		delay = min(2*delay, w.c.cfg.redeliveryMax)
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
