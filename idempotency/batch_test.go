package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/migrate"
)

// statementCounter is a pgx tracer that counts the round trips sent (a statement
// on its own, or a pgx batch: the claims send each statement as a batch of one,
// after any leading statements), so that tests can check how many round trips a
// claim took; alone counts the statements sent outside a batch.
type statementCounter struct{ n, alone atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	c.alone.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// setupCounted is setup with a pool whose statements are counted; schema,
// if not empty, is created first (for a WithTable option that names it).
func setupCounted(t *testing.T, schema string, opts ...migrate.Option) (*pgxpool.Pool, *statementCounter) {
	t.Helper()
	counter := new(statementCounter)
	pool := testenv.PostgresWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = counter })
	if schema != "" {
		if _, err := pool.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	return setupPool(t, pool, opts...), counter
}

// claimAllIn runs ClaimAll in tx and returns its result and the number of
// statements it sent.
func claimAllIn(t *testing.T, tx pgx.Tx, counter *statementCounter, store *idempotency.Store, scope string, reqs ...idempotency.Request) ([]idempotency.Claim, error, int64) {
	t.Helper()
	before := counter.n.Load()
	claims, err := store.ClaimAll(context.Background(), tx, scope, reqs)
	return claims, err, counter.n.Load() - before
}

// commitRecord commits a claim of (scope, key) with hash and, if not nil,
// a stored response.
func commitRecord(t *testing.T, pool *pgxpool.Pool, store *idempotency.Store, scope, key string, hash, resp []byte) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if c, err := store.Claim(ctx, tx, scope, key, hash); err != nil || c.Duplicate {
			return fmt.Errorf("claim %s: %+v %w", key, c, err)
		}
		if resp != nil {
			return store.Complete(ctx, tx, scope, key, resp)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func req(key string, hash []byte) idempotency.Request {
	return idempotency.Request{Key: key, Hash: hash}
}

func TestClaimAllOutcomes(t *testing.T) {
	pool, counter := setupCounted(t, "")
	ctx := context.Background()
	store := newStore(t)
	h1, h2 := idempotency.Hash([]byte("one")), idempotency.Hash([]byte("two"))
	commitRecord(t, pool, store, "s", "done-with-response", h1, []byte("r1"))
	commitRecord(t, pool, store, "s", "done-without-response", h2, nil)
	commitRecord(t, pool, store, "s", "done-nil-hash", nil, nil)
	first := idempotency.Claim{}
	dup := func(resp string) idempotency.Claim {
		if resp == "" {
			return idempotency.Claim{Duplicate: true}
		}
		return idempotency.Claim{Duplicate: true, Response: []byte(resp)}
	}

	tests := []struct {
		name       string
		reqs       []idempotency.Request
		want       []idempotency.Claim
		statements int64
	}{
		{"all new", []idempotency.Request{req("n3", h1), req("n1", h1), req("n2", nil)},
			[]idempotency.Claim{first, first, first}, 1},
		{"new and committed mixed", []idempotency.Request{
			req("n2", h1), req("done-with-response", h1), req("n1", h2),
			req("done-without-response", h2), req("done-nil-hash", []byte{}),
		}, []idempotency.Claim{first, dup("r1"), first, dup(""), dup("")}, 2},
		{"repeated new key", []idempotency.Request{req("n1", h1), req("n2", h2), req("n1", h1), req("n1", h1)},
			[]idempotency.Claim{first, first, dup(""), dup("")}, 1},
		{"repeated committed key", []idempotency.Request{req("done-with-response", h1), req("n1", h2), req("done-with-response", h1)},
			[]idempotency.Claim{dup("r1"), first, dup("r1")}, 2},
		{"nil and empty hash repeated", []idempotency.Request{req("n1", nil), req("n1", []byte{})},
			[]idempotency.Claim{first, dup("")}, 1},
		{"other scope is new", []idempotency.Request{req("done-with-response", h2)}, []idempotency.Claim{first}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scope := "s"
			if tt.name == "other scope is new" {
				scope = "other"
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			claims, err, n := claimAllIn(t, tx, counter, store, scope, tt.reqs...)
			if err != nil {
				t.Fatalf("ClaimAll: %v", err)
			}
			if !reflect.DeepEqual(claims, tt.want) {
				t.Fatalf("ClaimAll = %+v, want %+v", claims, tt.want)
			}
			if n != tt.statements {
				t.Fatalf("ClaimAll sent %d statements, want %d", n, tt.statements)
			}
			// The claimed keys hold the first occurrence's hash in tx.
			for i, r := range tt.reqs {
				if claims[i].Duplicate {
					continue
				}
				var stored []byte
				if err := tx.QueryRow(ctx, `SELECT request_hash FROM choreo_idempotency WHERE scope = $1 AND key = $2`,
					scope, r.Key).Scan(&stored); err != nil || !bytes.Equal(stored, r.Hash) {
					t.Fatalf("claimed %s: stored hash %x (%v), want %x", r.Key, stored, err, r.Hash)
				}
			}
		})
	}

	t.Run("committed claims are duplicates afterwards", func(t *testing.T) {
		reqs := []idempotency.Request{req("c2", h2), req("c1", h1)}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			claims, err := store.ClaimAll(ctx, tx, "s", reqs)
			if err != nil || !reflect.DeepEqual(claims, []idempotency.Claim{first, first}) {
				return fmt.Errorf("first ClaimAll: %+v %w", claims, err)
			}
			return store.Complete(ctx, tx, "s", "c1", []byte("done"))
		})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		claims, err := store.ClaimAll(ctx, tx, "s", reqs)
		if err != nil || !reflect.DeepEqual(claims, []idempotency.Claim{dup(""), dup("done")}) {
			t.Fatalf("second ClaimAll = %+v, %v", claims, err)
		}
	})

	t.Run("empty", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		for _, reqs := range [][]idempotency.Request{nil, {}} {
			claims, err, n := claimAllIn(t, tx, counter, store, "s", reqs...)
			if claims != nil || err != nil || n != 0 {
				t.Fatalf("ClaimAll(%#v) = %v, %v after %d statements; want nil, nil, 0", reqs, claims, err, n)
			}
		}
	})
}

func TestClaimAllErrors(t *testing.T) {
	pool, counter := setupCounted(t, "")
	ctx := context.Background()
	store := newStore(t)
	h1, h2 := idempotency.Hash([]byte("one")), idempotency.Hash([]byte("two"))
	commitRecord(t, pool, store, "s", "k1", h1, nil)
	commitRecord(t, pool, store, "s", "k2", h1, nil)
	if _, err := pool.Exec(ctx, `INSERT INTO choreo_idempotency (scope, key, request_hash, expires_at)
		VALUES ('s', 'expired', 'old', now() - interval '1 second')`); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", idempotency.MaxKeyBytes+1)

	tests := []struct {
		name          string
		scope         string
		reqs          []idempotency.Request
		want          error
		wantInMessage string
		statements    int64
	}{
		{"committed key, other hash", "s", []idempotency.Request{req("new", h1), req("k1", h2)}, idempotency.ErrKeyReused, `key "k1"`, 2},
		{"first reused key in key order", "s", []idempotency.Request{req("k2", h2), req("k1", h2)}, idempotency.ErrKeyReused, `key "k1"`, 2},
		// The insert, the lookup of the three existing keys, the takeover of
		// the expired one (before k2 in key order), then the reused key.
		{"new, duplicate, expired and reused keys", "s", []idempotency.Request{req("k2", h2), req("expired", h2), req("new", h1), req("k1", h1)},
			idempotency.ErrKeyReused, `key "k2"`, 3},
		{"repeated new key, other hash", "s", []idempotency.Request{req("n", h1), req("n", h2)}, idempotency.ErrKeyReused, `key "n"`, 1},
		{"repeated committed key, other hash", "s", []idempotency.Request{req("k1", h1), req("k1", nil)}, idempotency.ErrKeyReused, `key "k1"`, 2},
		{"nil hash vs real hash", "s", []idempotency.Request{req("n", nil), req("n", h1)}, idempotency.ErrKeyReused, `key "n"`, 1},
		{"empty key", "s", []idempotency.Request{req("a", h1), req("", h1)}, idempotency.ErrInvalidKey, "empty key", 0},
		{"key too long", "s", []idempotency.Request{req("a", h1), req(long, h1)}, idempotency.ErrInvalidKey, "key is 256 bytes", 0},
		{"empty scope", "", []idempotency.Request{req("a", h1)}, idempotency.ErrInvalidKey, "empty scope", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			claims, err, n := claimAllIn(t, tx, counter, store, tt.scope, tt.reqs...)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.wantInMessage) || claims != nil {
				t.Fatalf("ClaimAll = %+v, %v; want %v naming %s", claims, err, tt.want, tt.wantInMessage)
			}
			if n != tt.statements {
				t.Fatalf("ClaimAll sent %d statements, want %d", n, tt.statements)
			}
		})
	}

	t.Run("database errors are wrapped", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		tx, err := pool.Begin(cctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		cancel()
		_, err = store.ClaimAll(cctx, tx, "s", []idempotency.Request{req("a", nil)})
		if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "idempotency: claim") {
			t.Fatalf("ClaimAll with cancelled ctx = %v, want a wrapped context.Canceled", err)
		}
	})
}

// TestClaimAllTakesOverExpired: an expired record that is still in the
// table is taken over with one more statement after the lookup; a live one
// is a duplicate.
func TestClaimAllTakesOverExpired(t *testing.T) {
	pool, counter := setupCounted(t, "billing", migrate.WithIdempotencyTable("billing.idem"))
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO billing.idem (scope, key, request_hash, response, expires_at) VALUES
		('s', 'expired', 'old', 'old response', now() - interval '1 second'),
		('s', 'live', 'h', 'live response', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	store := newStore(t, idempotency.WithTable("billing.idem"))
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	claims, err, n := claimAllIn(t, tx, counter, store, "s",
		req("new", []byte("h")), req("live", []byte("h")), req("expired", []byte("new")), req("expired", []byte("new")))
	want := []idempotency.Claim{{}, {Duplicate: true, Response: []byte("live response")}, {}, {Duplicate: true}}
	if err != nil || !reflect.DeepEqual(claims, want) {
		t.Fatalf("ClaimAll = %+v, %v; want %+v", claims, err, want)
	}
	if n != 3 {
		t.Fatalf("ClaimAll sent %d statements, want 3 (the insert, the lookup and one takeover)", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var (
		hash, resp []byte
		live       bool
	)
	if err := pool.QueryRow(ctx, `SELECT request_hash, response, expires_at > now() FROM billing.idem
		WHERE scope = 's' AND key = 'expired'`).Scan(&hash, &resp, &live); err != nil {
		t.Fatal(err)
	}
	if string(hash) != "new" || resp != nil || !live {
		t.Fatalf("taken-over record: hash %q response %q live %v; want the new claim's", hash, resp, live)
	}
}

// TestClaimAllOverlappingSetsDoNotDeadlock: two transactions claim the same
// keys listed in opposite orders, while a third holds a key in the middle.
// Inserting in reqs order, each would take the keys on its side of the
// held one and then wait for the other's: a deadlock. Inserted in sorted
// order, the second waits for the first, and each key is claimed once.
func TestClaimAllOverlappingSetsDoNotDeadlock(t *testing.T) {
	for _, commitHolder := range []bool{false, true} {
		t.Run(fmt.Sprintf("holder commits %v", commitHolder), func(t *testing.T) {
			pool := setup(t)
			ctx := context.Background()
			store := newStore(t)
			hash := []byte("h")
			keys := []string{"a", "b", "m", "y", "z"}
			var asc, desc []idempotency.Request
			for _, k := range keys {
				asc = append(asc, req(k, hash))
				desc = slices.Insert(desc, 0, req(k, hash))
			}

			begin := func() (pgx.Tx, uint32) {
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { tx.Rollback(ctx) })
				var pid uint32
				if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
					t.Fatal(err)
				}
				return tx, pid
			}
			type result struct {
				claims []idempotency.Claim
				err    error
			}
			claimAsync := func(tx pgx.Tx, reqs []idempotency.Request) chan result {
				done := make(chan result, 1)
				go func() {
					c, err := store.ClaimAll(ctx, tx, "s", reqs)
					done <- result{c, err}
				}()
				return done
			}

			holder, _ := begin()
			if c, err := store.Claim(ctx, holder, "s", "m", hash); err != nil || c.Duplicate {
				t.Fatalf("holder claim: %+v %v", c, err)
			}
			txA, pidA := begin()
			doneA := claimAsync(txA, desc)
			testenv.WaitForLockWait(t, pool, pidA) // A holds a and b, waits for m
			txB, pidB := begin()
			doneB := claimAsync(txB, asc)
			testenv.WaitForLockWait(t, pool, pidB) // B waits for A's a

			if commitHolder {
				if err := holder.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err := holder.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			a := <-doneA
			if a.err != nil {
				// Let B finish before the cleanups roll its transaction back.
				_ = txA.Rollback(ctx)
				b := <-doneB
				t.Fatalf("A: %v (B: %v)", a.err, b.err)
			}
			select {
			case b := <-doneB:
				t.Fatalf("B returned while A was open: %+v %v", b.claims, b.err)
			default:
			}
			if err := txA.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			b := <-doneB
			if b.err != nil {
				t.Fatalf("B: %v", b.err)
			}
			// A lists the keys in descending order: z y m b a.
			for i, k := range keys {
				aDup := a.claims[len(keys)-1-i].Duplicate
				wantADup := k == "m" && commitHolder
				if aDup != wantADup || !b.claims[i].Duplicate {
					t.Errorf("key %s: A duplicate %v (want %v), B duplicate %v (want true)", k, aDup, wantADup, b.claims[i].Duplicate)
				}
			}
		})
	}
}

// TestClaimAllConcurrentExactlyOnce: 50 transactions claim the same 16 keys
// at once, each listing them in its own order; each key's work is done
// exactly once, and every other transaction sees it as a duplicate with the
// winner's response.
func TestClaimAllConcurrentExactlyOnce(t *testing.T) {
	pool := setupWide(t, 20)
	ctx := context.Background()
	store := newStore(t)
	const workers, nkeys = 50, 16
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("ev-%02d", i)
	}
	type outcome struct {
		key    string
		worker int
		claim  idempotency.Claim
	}
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		errs     = make(chan error, workers)
		outcomes = make(chan outcome, workers*nkeys)
	)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			order := slices.Clone(keys)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			reqs := make([]idempotency.Request, len(order))
			for i, k := range order {
				reqs[i] = req(k, idempotency.Hash([]byte(k)))
			}
			<-start
			var got []outcome
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				got = got[:0]
				claims, err := store.ClaimAll(ctx, tx, "payment", reqs)
				if err != nil {
					return err
				}
				for i, c := range claims {
					got = append(got, outcome{reqs[i].Key, w, c})
					if c.Duplicate {
						continue
					}
					if err := effect(ctx, tx, reqs[i].Key); err != nil {
						return err
					}
					if err := store.Complete(ctx, tx, "payment", reqs[i].Key, fmt.Appendf(nil, "by %d", w)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				errs <- err
				return
			}
			for _, o := range got {
				outcomes <- o
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	close(outcomes)
	for err := range errs {
		t.Errorf("worker: %v", err)
	}
	winner := make(map[string]int)
	var dups []outcome
	for o := range outcomes {
		if !o.claim.Duplicate {
			if w, ok := winner[o.key]; ok {
				t.Errorf("key %s claimed by workers %d and %d", o.key, w, o.worker)
			}
			winner[o.key] = o.worker
			continue
		}
		dups = append(dups, o)
	}
	if len(winner) != nkeys || len(dups) != (workers-1)*nkeys {
		t.Fatalf("%d keys claimed, %d duplicates; want %d and %d", len(winner), len(dups), nkeys, (workers-1)*nkeys)
	}
	for _, d := range dups {
		if want := fmt.Sprintf("by %d", winner[d.key]); string(d.claim.Response) != want {
			t.Fatalf("worker %d: duplicate %s has response %q, want the winner's %q", d.worker, d.key, d.claim.Response, want)
		}
	}
	for _, k := range keys {
		if n := effects(t, pool, k); n != 1 {
			t.Fatalf("key %s: effects = %d, want 1", k, n)
		}
	}
}

// TestClaimAllMatchesClaim compares ClaimAll with Claim called for each
// request in sorted key order, on random requests against a table with
// new, committed, expired and reused keys: same claims, same error, same
// records in the transaction.
func TestClaimAllMatchesClaim(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	store := newStore(t)
	hashes := [][]byte{nil, []byte("h1"), []byte("h2")}
	if _, err := pool.Exec(ctx, `INSERT INTO choreo_idempotency (scope, key, request_hash, response, expires_at) VALUES
		('s', 'live-h1', 'h1', 'r', now() + interval '1 hour'),
		('s', 'live-h2-no-response', 'h2', NULL, now() + interval '1 hour'),
		('s', 'live-empty', '', 'e', now() + interval '1 hour'),
		('s', 'expired-h1', 'h1', 'old', now() - interval '1 hour'),
		('s', 'expired-h2', 'h2', NULL, now() - interval '1 hour'),
		('other', 'new-1', 'h1', 'other scope', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	keys := []string{"live-h1", "live-h2-no-response", "live-empty", "expired-h1", "expired-h2", "new-1", "new-2", "new-3", "ü-new"}

	// state returns the records of scope s as tx sees them.
	state := func(tx pgx.Tx) []string {
		rows, err := tx.Query(ctx, `SELECT key || ' ' || encode(request_hash, 'hex') || ' ' ||
			coalesce(encode(response, 'hex'), 'null') || ' ' || (expires_at > now())::text
			FROM choreo_idempotency WHERE scope = 's' ORDER BY key`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	run := func(fn func(tx pgx.Tx) ([]idempotency.Claim, error)) (claims []idempotency.Claim, err error, records []string) {
		tx, txErr := pool.Begin(ctx)
		if txErr != nil {
			t.Fatal(txErr)
		}
		defer tx.Rollback(ctx)
		claims, err = fn(tx)
		if err == nil {
			records = state(tx)
		}
		return claims, err, records
	}

	rng := rand.New(rand.NewPCG(7, 7))
	var reused, duplicates int
	for i := range 300 {
		reqs := make([]idempotency.Request, rng.IntN(12))
		for j := range reqs {
			reqs[j] = req(keys[rng.IntN(len(keys))], hashes[rng.IntN(len(hashes))])
		}
		gotClaims, gotErr, gotRecords := run(func(tx pgx.Tx) ([]idempotency.Claim, error) {
			return store.ClaimAll(ctx, tx, "s", reqs)
		})
		wantClaims, wantErr, wantRecords := run(func(tx pgx.Tx) ([]idempotency.Claim, error) {
			order := make([]int, len(reqs))
			for i := range order {
				order[i] = i
			}
			slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(reqs[a].Key, reqs[b].Key) })
			var claims []idempotency.Claim
			if len(reqs) > 0 {
				claims = make([]idempotency.Claim, len(reqs))
			}
			for _, i := range order {
				c, err := store.Claim(ctx, tx, "s", reqs[i].Key, reqs[i].Hash)
				if err != nil {
					return nil, err
				}
				claims[i] = c
			}
			return claims, nil
		})
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(gotClaims, wantClaims) {
			t.Fatalf("case %d %+v:\nClaimAll = %+v, %v\nClaim    = %+v, %v", i, reqs, gotClaims, gotErr, wantClaims, wantErr)
		}
		if !slices.Equal(gotRecords, wantRecords) {
			t.Fatalf("case %d %+v: records after ClaimAll:\n%s\nafter Claim:\n%s", i, reqs,
				strings.Join(gotRecords, "\n"), strings.Join(wantRecords, "\n"))
		}
		if errors.Is(gotErr, idempotency.ErrKeyReused) {
			reused++
		}
		for _, c := range gotClaims {
			if c.Duplicate {
				duplicates++
			}
		}
	}
	// The random cases must have covered both outcomes, not only first claims.
	if reused == 0 || duplicates == 0 {
		t.Fatalf("cases covered %d reused keys and %d duplicates; want some of each", reused, duplicates)
	}
}

// benchmarkClaims measures claiming 16 keys in one transaction with claim,
// for new keys (the transaction is rolled back, so the figure is the claims'
// cost without the commit) and for 16 committed keys (a redelivered batch).
// It reports the statements sent per batch as stmts/op.
func benchmarkClaims(b *testing.B, claim func(ctx context.Context, store *idempotency.Store, tx pgx.Tx, reqs []idempotency.Request) error) {
	counter := new(statementCounter)
	ctx := context.Background()
	pool := testenv.PostgresWith(b, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = counter })
	if err := migrate.Up(ctx, pool); err != nil {
		b.Fatal(err)
	}
	store := newStore(b)
	const batch = 16
	batchOf := func(prefix string) []idempotency.Request {
		reqs := make([]idempotency.Request, batch)
		for i := range reqs {
			data := fmt.Appendf(nil, `{"event":%d}`, i)
			reqs[i] = req(fmt.Sprintf("%s-%02d", prefix, i), idempotency.Hash([]byte("order.created"), data))
		}
		return reqs
	}
	once := func(b *testing.B, reqs []idempotency.Request) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer tx.Rollback(ctx)
		before := counter.n.Load()
		if err := claim(ctx, store, tx, reqs); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(counter.n.Load()-before), "stmts/op")
	}
	b.Run("new", func(b *testing.B) {
		n := 0
		for b.Loop() {
			n++
			once(b, batchOf(fmt.Sprintf("new-%d", n)))
		}
	})
	b.Run("duplicate", func(b *testing.B) {
		reqs := batchOf("committed")
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return claim(ctx, store, tx, reqs) }); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			once(b, reqs)
		}
	})
}

func BenchmarkClaimAll(b *testing.B) {
	benchmarkClaims(b, func(ctx context.Context, store *idempotency.Store, tx pgx.Tx, reqs []idempotency.Request) error {
		_, err := store.ClaimAll(ctx, tx, "payment", reqs)
		return err
	})
}

// BenchmarkClaimPerKey is what a batch took before ClaimAll: one Claim per
// key, in key order.
func BenchmarkClaimPerKey(b *testing.B) {
	benchmarkClaims(b, func(ctx context.Context, store *idempotency.Store, tx pgx.Tx, reqs []idempotency.Request) error {
		sorted := slices.SortedFunc(slices.Values(reqs), func(a, b idempotency.Request) int { return strings.Compare(a.Key, b.Key) })
		for _, r := range sorted {
			if _, err := store.Claim(ctx, tx, "payment", r.Key, r.Hash); err != nil {
				return err
			}
		}
		return nil
	})
}
