package consumer

import (
	"context"
	"sync/atomic"
	"testing"
)

// While 10,000 events flow, a second and a third consumer join the group and the first
// leaves: every event is handled, no business effect happens twice, and the events of
// each key are applied in order (applySeq rejects a gap, which would be dead-lettered).
func TestRebalanceUnderLoad(t *testing.T) {
	const (
		partitions = 6
		nKeys      = 100
		perKey     = 100 // 10,000 events
		total      = nKeys * perKey
	)
	e := newChainEnv(t, partitions)
	recs := seqEvents(t, e.topic, keys(nKeys), perKey)

	var duplicates atomic.Int64
	countDup := func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			err := next(ctx, m)
			if err == nil && m.Outcome == OutcomeDuplicate {
				duplicates.Add(1)
			}
			return err
		}
	}
	h := wrap(e.standard(t, StandardConfig{}), countDup)
	newConsumer := func() *Consumer { return e.consumer(t, h, WithMaxBuffered(64)) }

	// Produce in ten waves, so that the membership changes happen while events flow.
	produced := make(chan struct{})
	waves := make(chan struct{}, 10)
	go func() {
		defer close(produced)
		for i := 0; i < 10; i++ {
			<-waves
			if err := e.producer.ProduceSync(context.Background(), recs[i*total/10:(i+1)*total/10]...).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
		}
	}()
	first := start(t, newConsumer())
	waves <- struct{}{}
	waves <- struct{}{}
	waitFor(t, "1,000 effects", func() bool { return e.effects(t) >= 1000 })
	start(t, newConsumer())
	waves <- struct{}{}
	waves <- struct{}{}
	waitFor(t, "3,000 effects", func() bool { return e.effects(t) >= 3000 })
	start(t, newConsumer())
	waves <- struct{}{}
	waves <- struct{}{}
	waitFor(t, "5,000 effects", func() bool { return e.effects(t) >= 5000 })
	if err := first.stop(t); err != nil {
		t.Errorf("first consumer: %v", err)
	}
	for range 4 {
		waves <- struct{}{}
	}
	<-produced
	waitFor(t, "all effects", func() bool { return e.effects(t) >= total })
	e.waitCommitted(t)

	if n := e.effects(t); n != total {
		t.Errorf("%d effects, want %d", n, total)
	}
	if n := count(t, e.pool, `SELECT count(DISTINCT event_id) FROM effects`); n != total {
		t.Errorf("%d distinct events have effects, want %d", n, total)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM entities WHERE seq = $1`, perKey); n != nKeys {
		t.Errorf("%d of %d keys reached their last event", n, nKeys)
	}
	if n := e.dlqLen(t); n != 0 {
		t.Errorf("%d events dead-lettered (out of order or failed), want 0", n)
	}
	t.Logf("redeliveries absorbed by idempotency: %d", duplicates.Load())
}
