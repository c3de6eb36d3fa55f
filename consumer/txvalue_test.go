package consumer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
)

type sumKey struct{}

// The handlers of a StandardBatch transaction share a TxValue, and one AtCommitFunc writes
// what they accumulated, with the COMMIT, after every handler returned.
func TestTxValueAndAtCommitFuncInABatch(t *testing.T) {
	pool, tr, _ := atCommitDB(t)
	ctx := context.Background()
	brokers := testenv.Kafka(t)
	topic := testenv.Name(t, "in")
	h, err := StandardBatch(StandardConfig{DB: pool, DeadLetter: newProducer(t, brokers), Name: "sum", Retry: RetryConfig{MaxAttempts: 1},
		Handler: func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			var p seqPayload
			if err := ev.DecodeData(&p); err != nil {
				return err
			}
			v, ok := TxValue(ctx, tx, sumKey{}, func() any { return new(int) })
			if !ok {
				return errors.New("no consumer transaction")
			}
			sum := v.(*int)
			*sum += p.Seq
			return AtCommitFunc(ctx, tx, sumKey{}, func(b *pgx.Batch) { addTo(*sum)(b) })
		}})
	if err != nil {
		t.Fatal(err)
	}
	var ms []*Message
	for i, k := range []string{"x", "y", "x"} {
		r := eventRecord(t, topic, "test.step", k, seqPayload{Seq: i + 1})
		r.Offset = int64(i)
		ms = append(ms, &Message{Record: r, Group: "g"})
	}
	tr.Take()
	if err := h(ctx, ms); err != nil {
		t.Fatal(err)
	}
	trips := tr.Take()
	if len(trips) != 2 || trips[1] != "update; commit" {
		t.Errorf("round trips %q, want [begin; claim] and [update; commit]: one statement for the batch", trips)
	}
	if balance, records, _ := atCommitState(t, pool); balance != 106 || records != 3 {
		t.Errorf("balance %d, %d records; want 106 (100 + 1 + 2 + 3, written once), 3", balance, records)
	}
}

// Outside a consumer transaction TxValue stores nothing and AtCommitFunc sends at once.
func TestAtCommitFuncOutsideConsumer(t *testing.T) {
	pool, tr, _ := atCommitDB(t)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if v, ok := TxValue(ctx, tx, sumKey{}, func() any { return new(int) }); ok || v != nil {
			t.Errorf("TxValue outside a consumer transaction = %v, %v; want nil, false", v, ok)
		}
		tr.Take()
		if err := AtCommitFunc(ctx, tx, sumKey{}, addTo(7)); err != nil {
			return err
		}
		if trips := tr.Take(); !slices.Equal(trips, []string{"update"}) {
			t.Errorf("round trips %q, want the update at once", trips)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if balance, _, _ := atCommitState(t, pool); balance != 107 {
		t.Errorf("balance %d, want 107", balance)
	}
	if err := AtCommitFunc(ctx, nil, sumKey{}, addTo(1)); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "AtCommitFunc") {
		t.Errorf("nil tx: %v, want ErrInvalidConfig", err)
	}
}
