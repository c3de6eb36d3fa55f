package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
)

// handWritten is the floor: the pipeline a competent engineer writes without choreo,
// with franz-go, pgx and redislock. A kgo group consumer hands each partition's records to
// its own goroutine (franz-go's goroutine-per-partition pattern with AutoCommitMarks and
// BlockRebalanceOnPoll); the goroutine handles them in order — redislock.Obtain on the
// account, one transaction (dedup insert, UPDATE, outbox insert), release — and marks each
// record for the periodic autocommit once handled. A relay loop reads the outbox in id
// order, produces the rows, waits for the acks and deletes them; commits wake it through a
// channel, and it also looks every 100 ms.
type handWritten struct {
	brokers []string
	group   string
	in, out string
	pool    *pgxpool.Pool
	locks   *redislock.Client
	prefix  string // Redis key prefix of the locks
	kgoOpts []kgo.Opt
	log     *slog.Logger
	onAcked func(n int) // called with the number of records each relay round had acknowledged
	noRelay bool        // run no relay (another process of the same pipeline runs it)

	wake chan struct{}
}

// run consumes until ctx is cancelled, then stops the workers and the relay and commits
// the marked offsets.
func (h *handWritten) run(ctx context.Context) error {
	h.wake = make(chan struct{}, 1)
	var (
		mu      sync.Mutex
		workers = map[int32]*partitionWorker{}
		wg      sync.WaitGroup
	)
	stop := func(parts map[string][]int32) {
		mu.Lock()
		var stopping []*partitionWorker
		for _, ps := range parts {
			for _, p := range ps {
				if w := workers[p]; w != nil {
					close(w.recs)
					stopping = append(stopping, w)
					delete(workers, p)
				}
			}
		}
		mu.Unlock()
		for _, w := range stopping {
			<-w.done
		}
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(h.brokers...),
		kgo.ConsumerGroup(h.group),
		kgo.ConsumeTopics(h.in),
		kgo.AutoCommitMarks(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for _, ps := range assigned {
				for _, p := range ps {
					w := &partitionWorker{recs: make(chan []*kgo.Record, 4), done: make(chan struct{})}
					workers[p] = w
					wg.Go(func() { h.work(ctx, cl, w) })
				}
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
			stop(revoked)
			if err := cl.CommitMarkedOffsets(ctx); err != nil {
				h.log.Warn("commit on revoke", "err", err)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) { stop(lost) }),
	}, h.kgoOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	relayDone := make(chan error, 1)
	if h.noRelay {
		relayDone <- nil
	} else {
		go func() { relayDone <- h.relay(ctx) }()
	}

	for {
		fs := cl.PollRecords(ctx, 1000)
		if fs.IsClientClosed() || ctx.Err() != nil {
			break
		}
		fs.EachError(func(t string, p int32, err error) { h.log.Warn("fetch", "topic", t, "partition", p, "err", err) })
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			mu.Lock()
			w := workers[p.Partition]
			mu.Unlock()
			if w != nil && len(p.Records) > 0 {
				w.recs <- p.Records
			}
		})
		cl.AllowRebalance()
	}
	cl.AllowRebalance() // the last poll may have returned with rebalances blocked
	cl.Close()          // revokes every partition: the workers finish, the marks are committed
	wg.Wait()
	return <-relayDone
}

type partitionWorker struct {
	recs chan []*kgo.Record
	done chan struct{}
}

// work handles one partition's records in order until its channel is closed. A failed
// record is retried after a short pause, never skipped.
func (h *handWritten) work(ctx context.Context, cl *kgo.Client, w *partitionWorker) {
	defer close(w.done)
	for recs := range w.recs {
		for _, r := range recs {
			for {
				err := h.handle(ctx, r)
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					return
				}
				h.log.Warn("handle", "partition", r.Partition, "offset", r.Offset, "err", err)
				time.Sleep(20 * time.Millisecond)
			}
			cl.MarkCommitRecords(r)
		}
	}
}

// handle runs one record: lock the account, dedup + business transaction, release.
func (h *handWritten) handle(ctx context.Context, r *kgo.Record) error {
	ev, err := event.FromRecord(r)
	if err != nil {
		return err
	}
	lk, err := h.locks.Obtain(ctx, h.prefix+ev.Subject, 10*time.Second, &redislock.Options{
		RetryStrategy: redislock.LimitRetry(redislock.ExponentialBackoff(time.Millisecond, 50*time.Millisecond), 100),
	})
	if err != nil {
		return err
	}
	defer lk.Release(context.WithoutCancel(ctx))

	committed := false
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO hw_dedup (event_id) VALUES ($1) ON CONFLICT DO NOTHING`, ev.ID)
		if err != nil || tag.RowsAffected() == 0 {
			return err // a duplicate commits nothing but an empty transaction
		}
		next, err := applyCredit(ctx, tx, ev, false)
		if err != nil {
			return err
		}
		out, err := event.ToRecord(h.out, next)
		if err != nil {
			return err
		}
		headers, err := json.Marshal(out.Headers)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO hw_outbox (topic, key, headers, payload) VALUES ($1, $2, $3, $4)`,
			out.Topic, string(out.Key), headers, out.Value)
		committed = err == nil
		return err
	})
	if err != nil {
		return err
	}
	if committed {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// relay publishes hw_outbox rows in id order, 1000 at a time: produce, wait for every
// ack, delete. It stops when ctx is cancelled.
func (h *handWritten) relay(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		n, err := h.relayOnce(ctx, cl)
		if err != nil && ctx.Err() == nil {
			h.log.Warn("relay", "err", err)
		}
		if n > 0 {
			h.onAcked(n)
			continue
		}
		select {
		case <-ctx.Done():
		case <-h.wake:
		case <-tick.C:
		}
	}
	return nil
}

func (h *handWritten) relayOnce(ctx context.Context, cl *kgo.Client) (int, error) {
	rows, err := h.pool.Query(ctx, `SELECT id, topic, key, headers, payload FROM hw_outbox ORDER BY id LIMIT 1000`)
	if err != nil {
		return 0, err
	}
	var (
		ids  []int64
		recs []*kgo.Record
	)
	for rows.Next() {
		var (
			id         int64
			topic, key string
			headers    []byte
			r          = &kgo.Record{}
		)
		if err := rows.Scan(&id, &topic, &key, &headers, &r.Value); err != nil {
			return 0, err
		}
		if err := json.Unmarshal(headers, &r.Headers); err != nil {
			return 0, err
		}
		r.Topic, r.Key = topic, []byte(key)
		ids, recs = append(ids, id), append(recs, r)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(recs) == 0 {
		return 0, nil
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, err
	}
	if _, err := h.pool.Exec(ctx, `DELETE FROM hw_outbox WHERE id = ANY($1)`, ids); err != nil {
		return 0, errors.Join(errors.New("delete after ack (the rows will be produced again)"), err)
	}
	return len(recs), nil
}
