package idempotency_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/internal/txhook"
)

// ClaimAll, like Claim, sends the statements the caller asked to lead the claim
// (txhook.WithLeading: the consumer's fence check) in one pgx batch with its own
// statement, reads their row first, and returns a leading statement's error as it is,
// before its own outcome. Later statements of ClaimAll (a takeover) do not send them again.
func TestClaimAllLeadingStatements(t *testing.T) {
	pool, counter := setupCounted(t, "")
	store, err := idempotency.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	errLead := errors.New("test: leading statement says no")
	var read []int
	lead := func(n int, fail bool) txhook.Stmt {
		return txhook.Stmt{SQL: "SELECT $1::int", Args: []any{n}, Row: func(row pgx.Row) error {
			var got int
			if err := row.Scan(&got); err != nil {
				return err
			}
			read = append(read, got)
			if fail {
				return errLead
			}
			return nil
		}}
	}
	for _, fail := range []bool{false, true} {
		read = nil
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			before := counter.alone.Load()
			lctx := txhook.WithLeading(ctx, lead(1, false), lead(2, fail))
			claims, err := store.ClaimAll(lctx, tx, "s", []idempotency.Request{req("b", []byte("h")), req("a", []byte("h"))})
			if n := counter.alone.Load() - before; n != 0 {
				t.Errorf("fail=%v: %d statements outside a batch, want 0", fail, n)
			}
			if err != nil {
				return err
			}
			if len(claims) != 2 || claims[0].Duplicate || claims[1].Duplicate {
				t.Errorf("claims %+v, want two first-time claims", claims)
			}
			return nil
		})
		if len(read) != 2 || read[0] != 1 || read[1] != 2 {
			t.Errorf("fail=%v: leading rows read %v, want [1 2]", fail, read)
		}
		if fail != errors.Is(err, errLead) || (!fail && err != nil) {
			t.Errorf("fail=%v: ClaimAll: %v", fail, err)
		}
		if fail && err != errLead {
			t.Errorf("leading error %v not returned as it is", err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM choreo_idempotency`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("%d records, want the 2 of the transaction whose leading statements passed", n)
	}
}
