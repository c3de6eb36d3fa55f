package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

func TestRetryable(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{errors.New("connection reset"), true},
		{fmt.Errorf("wrapped: %w", lock.ErrNotObtained), true},
		{lock.ErrLost, true},
		{lock.ErrStaleToken, true},
		{Permanent(errors.New("validation failed")), false},
		{fmt.Errorf("outer: %w", Permanent(errors.New("inner"))), false},
		{fmt.Errorf("decode: %w", event.ErrMalformed), false},
		{fmt.Errorf("claim: %w", idempotency.ErrKeyReused), false},
		{idempotency.ErrInvalidKey, false},
		{fmt.Errorf("%w: x", ErrUnknownType), false},
		{&panicError{value: "boom"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := Retryable(tt.err); got != tt.want {
			t.Errorf("Retryable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
	if Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	inner := errors.New("inner")
	if !errors.Is(Permanent(inner), inner) {
		t.Error("Permanent hides the wrapped error from errors.Is")
	}
}

func TestRetry(t *testing.T) {
	transient := errors.New("transient")
	tests := []struct {
		name         string
		errs         []error // returned by successive attempts; nil after the list
		policy       RetryConfig
		wantAttempts int
		wantErr      error // nil: success
		exhausted    bool
	}{
		{name: "first attempt succeeds", wantAttempts: 1},
		{name: "recovers on attempt 3", errs: []error{transient, transient}, wantAttempts: 3},
		{name: "permanent", errs: []error{Permanent(transient)}, wantAttempts: 1, wantErr: transient},
		{name: "malformed", errs: []error{fmt.Errorf("x: %w", event.ErrMalformed)}, wantAttempts: 1, wantErr: event.ErrMalformed},
		{name: "key reused", errs: []error{idempotency.ErrKeyReused}, wantAttempts: 1, wantErr: idempotency.ErrKeyReused},
		{name: "unknown type", errs: []error{ErrUnknownType}, wantAttempts: 1, wantErr: ErrUnknownType},
		{name: "outage returned at once", errs: []error{transient, fmt.Errorf("db: %w", ErrOutage)}, wantAttempts: 2, wantErr: ErrOutage},
		{
			name: "no count limit by default: the elapsed time bounds it", errs: slices.Repeat([]error{transient}, 40),
			policy: RetryConfig{MaxElapsed: time.Hour}, wantAttempts: 41,
		},
		{
			// Contention outlasting the budget is waited out like an outage, never
			// dead-lettered: the error matches ErrOutage, not ErrRetriesExhausted.
			name: "lock not obtained until attempts run out", errs: []error{lock.ErrNotObtained, lock.ErrNotObtained, lock.ErrNotObtained},
			policy: RetryConfig{MaxAttempts: 3}, wantAttempts: 3, wantErr: ErrOutage, exhausted: false,
		},
		{
			name: "elapsed time runs out", errs: []error{transient, transient},
			policy:       RetryConfig{MaxElapsed: time.Nanosecond},
			wantAttempts: 1, wantErr: transient, exhausted: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.policy
			p.BaseDelay, p.MaxDelay = time.Microsecond, 10*time.Microsecond
			var calls int
			m := &Message{}
			err := retryInPlace(p)(func(context.Context, *Message) error {
				calls++
				if m.Attempt != calls {
					t.Errorf("m.Attempt = %d on call %d", m.Attempt, calls)
				}
				if calls <= len(tt.errs) {
					return tt.errs[calls-1]
				}
				return nil
			})(context.Background(), m)
			if calls != tt.wantAttempts {
				t.Errorf("%d attempts, want %d", calls, tt.wantAttempts)
			}
			switch {
			case tt.wantErr == nil && err != nil:
				t.Errorf("error %v, want success", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
			if got := errors.Is(err, ErrRetriesExhausted); got != tt.exhausted {
				t.Errorf("ErrRetriesExhausted = %v, want %v (%v)", got, tt.exhausted, err)
			}
		})
	}
}

// A worker that stops (revoke, shutdown) interrupts the backoff at once; the error says
// the record was abandoned, so DeadLetter leaves it for the partition's next owner.
func TestRetryStopsWithWorker(t *testing.T) {
	stop := make(chan struct{})
	ctx := context.WithValue(context.Background(), stopKey{}, stop)
	var calls int
	h := retryInPlace(RetryConfig{BaseDelay: time.Hour, MaxDelay: time.Hour, MaxElapsed: 2 * time.Hour})(
		func(context.Context, *Message) error {
			calls++
			if calls == 1 {
				close(stop)
			}
			return errors.New("transient")
		})
	err := h(ctx, &Message{})
	if !abandoned(ctx, err) || calls != 1 {
		t.Fatalf("after stop: calls %d, err %v; want 1 call and an abandoned error", calls, err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	calls = 0
	err = retryInPlace(RetryConfig{BaseDelay: time.Hour, MaxDelay: time.Hour, MaxElapsed: 2 * time.Hour})(func(context.Context, *Message) error {
		calls++
		cancel()
		return errors.New("transient")
	})(cctx, &Message{})
	if !abandoned(cctx, err) || calls != 1 {
		t.Fatalf("after cancel: calls %d, err %v", calls, err)
	}
}

// A lease held by another holder for longer than the retry budget (e.g. the key of a
// lease whose holder lost Redis, still alive on the server until its TTL) is waited out
// like an outage: the record is handled once the lease is free, never dead-lettered.
func TestLockContentionOutlastingBudgetIsWaitedOut(t *testing.T) {
	e := newChainEnv(t, 1)
	rdb, ns := testenv.Redis(t)
	e.locker = newLocker(t, rdb, lock.WithNamespace(ns), lock.WithMaxWait(50*time.Millisecond))
	other := newLocker(t, rdb, lock.WithNamespace(ns))
	held, err := other.Acquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	h := e.standard(t, StandardConfig{Retry: RetryConfig{BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond, MaxElapsed: 200 * time.Millisecond}})
	c := e.consumer(t, h, WithOutageBackoff(10*time.Millisecond, 100*time.Millisecond))
	produce(t, e.producer, eventRecord(t, e.topic, "test.step", "k", seqPayload{Seq: 1}))
	start(t, c)
	waitFor(t, "the contention to be reported as an outage", func() bool { return errors.Is(c.Health(), ErrOutage) })
	if n := e.effects(t); n != 0 {
		t.Fatalf("%d effects while the lease was held elsewhere", n)
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(t)
	if n := e.effects(t); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	if n := e.dlqLen(t); n != 0 {
		t.Fatalf("%d dead letters, want 0: lock contention is never the record's fault", n)
	}
	waitFor(t, "Health to clear", func() bool { return c.Health() == nil })
}
