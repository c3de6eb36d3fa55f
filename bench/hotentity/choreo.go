package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/outbox"
)

// choreoName is the choreo pipeline's handler name: its idempotency scope is
// "<group>/hot".
const choreoName = "hot"

// creditSQL is the business write: add the event's amount to its account.
const creditSQL = `UPDATE accounts SET balance = balance + $2 WHERE id = $1`

// applyCredit is the business step every mode runs in its transaction: add the event's
// amount to its account and return the outgoing event (caused by it) to enqueue. The
// UPDATE is sent at once with tx.Exec or, when atCommit, queued with consumer.AtCommit to
// go out with the transaction's COMMIT (in the choreo pipeline's transaction; elsewhere
// AtCommit sends it at once too).
func applyCredit(ctx context.Context, tx pgx.Tx, ev event.Event, atCommit bool) (event.Event, error) {
	var c credit
	if err := ev.DecodeData(&c); err != nil {
		return event.Event{}, err
	}
	if atCommit {
		if err := consumer.AtCommit(ctx, tx, func(b *pgx.Batch) { b.Queue(creditSQL, ev.Subject, c.Amount) }); err != nil {
			return event.Event{}, err
		}
	} else if _, err := tx.Exec(ctx, creditSQL, ev.Subject, c.Amount); err != nil {
		return event.Event{}, err
	}
	next, err := event.New("hotentity", "account.credited", ev.Subject, c)
	if err != nil {
		return event.Event{}, err
	}
	return next.CausedBy(ev), nil
}

// choreoPipeline is the same pipeline on the library: consumer.Standard (Lock = lock.New,
// Fence, AfterCommit ob.Wake; the idempotency claim is the dedup), in batch mode with
// consumer.StandardBatch when batch > 0, with the UPDATE queued by consumer.AtCommit when atCommit,
// with signed outgoing events and verified incoming ones when signer is set, and an
// outbox.Relay linked with WithOutbox.
type choreoPipeline struct {
	brokers []string
	group   string
	in, out string
	batch   int
	// atCommit queues the UPDATE with consumer.AtCommit (it rides the COMMIT's round
	// trip) instead of sending it with tx.Exec.
	atCommit bool
	// unfenced turns the fence check off (StandardConfig.Fence false): the difference to
	// choreo is what the fence's row write costs per event.
	unfenced bool
	// notify has the outbox send a NOTIFY (outbox.WithNotifier) so that the relay leader
	// in another process of the same pipeline learns of rows this one commits.
	notify bool
	// signer, if set, signs every event the outbox stores (outbox.WithSigner), and the
	// consumer verifies each input event against trusted (StandardConfig.TrustedKeys).
	signer  *event.Signer
	trusted map[string]*event.KeySet
	pool    *pgxpool.Pool
	rdb     *redis.Client
	lockNS  string
	kgoOpts []kgo.Opt
	log     *slog.Logger
	onAcked func(n int)
	// txs and records count the committed or skipped handlings (a batch counts once) and
	// the records they settled, for the mean events per transaction.
	txs, records atomic.Int64
}

// run consumes until ctx is cancelled, then stops the consumer, the relay and the lease
// releases.
func (p *choreoPipeline) run(ctx context.Context) error {
	var obOpts []outbox.Option
	if p.notify {
		obOpts = append(obOpts, outbox.WithNotifier(p.pool))
	}
	if p.signer != nil {
		obOpts = append(obOpts, outbox.WithSigner(p.signer))
	}
	ob, err := outbox.New(obOpts...)
	if err != nil {
		return err
	}
	relayClient, err := kgo.NewClient(kgo.SeedBrokers(p.brokers...))
	if err != nil {
		return err
	}
	defer relayClient.Close()
	relay, err := outbox.NewRelay(p.pool, relayClient, ob, outbox.WithLogger(p.log),
		outbox.WithAfterAck(func(_ context.Context, batch []outbox.Published) error {
			p.onAcked(len(batch))
			return nil
		}))
	if err != nil {
		return err
	}
	dlq, err := kgo.NewClient(kgo.SeedBrokers(p.brokers...))
	if err != nil {
		return err
	}
	defer dlq.Close()
	locker, err := lock.New(p.rdb, lock.WithNamespace(p.lockNS))
	if err != nil {
		return err
	}
	cfg := consumer.StandardConfig{
		DB: p.pool, DeadLetter: dlq, Locker: locker, Fence: !p.unfenced, Name: choreoName,
		AfterCommit: []func(){ob.Wake}, Logger: p.log, TrustedKeys: p.trusted,
		Handler: func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			next, err := applyCredit(ctx, tx, ev, p.atCommit)
			if err != nil {
				return err
			}
			return ob.Enqueue(ctx, tx, p.out, next)
		},
	}
	std, err := consumer.Standard(cfg)
	if err != nil {
		return err
	}
	h := func(ctx context.Context, m *consumer.Message) error {
		if err := std(ctx, m); err != nil {
			return err
		}
		p.txs.Add(1)
		p.records.Add(1)
		return nil
	}
	opts := []consumer.Option{consumer.WithLogger(p.log), consumer.WithClientOptions(p.kgoOpts...)}
	if p.batch > 0 {
		bh, err := consumer.StandardBatch(cfg)
		if err != nil {
			return err
		}
		opts = append(opts, consumer.WithBatch(p.batch, func(ctx context.Context, ms []*consumer.Message) error {
			if err := bh(ctx, ms); err != nil {
				return err
			}
			p.txs.Add(1)
			p.records.Add(int64(len(ms)))
			return nil
		}))
	}
	cons, err := consumer.New(p.brokers, p.group, []string{p.in}, h, opts...)
	if err != nil {
		return err
	}
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(ctx) }()
	err = cons.Run(ctx)
	if werr := locker.Wait(context.WithoutCancel(ctx)); err == nil {
		err = werr
	}
	if rerr := <-relayDone; err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("choreo: %w", err)
	}
	return nil
}
