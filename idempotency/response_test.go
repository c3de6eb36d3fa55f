package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/idempotency"
)

// TestClaimWithResponse: the response given to the claim is stored with the
// record (no Complete), rolls back with it, is what duplicates receive, and
// a different hash is still ErrKeyReused.
func TestClaimWithResponse(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	store := newStore(t)
	h1, h2 := []byte("h1"), []byte("h2")
	claim := func(key string, hash, resp []byte, commit bool) (idempotency.Claim, error) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		c, err := store.ClaimWithResponse(ctx, tx, "http", key, hash, resp)
		if err != nil {
			return c, err
		}
		if !c.Duplicate {
			if err := effect(ctx, tx, key); err != nil {
				t.Fatal(err)
			}
		}
		if commit {
			return c, tx.Commit(ctx)
		}
		return c, nil
	}
	steps := []struct {
		name          string
		key           string
		hash, resp    []byte
		commit        bool
		wantDuplicate bool
		wantResponse  []byte
		wantErr       error
		wantEffects   int
	}{
		{"first claim rolled back", "k1", h1, []byte("r-rolled-back"), false, false, nil, nil, 0},
		{"retry after rollback does the work", "k1", h1, []byte("r1"), true, false, nil, nil, 1},
		{"duplicate gets the first response", "k1", h1, []byte("r-other"), true, true, []byte("r1"), nil, 1},
		{"same key different hash", "k1", h2, []byte("r2"), true, false, nil, idempotency.ErrKeyReused, 1},
		{"nil response stores none", "k2", h1, nil, true, false, nil, nil, 1},
		{"duplicate of nil response", "k2", h1, []byte("x"), true, true, nil, nil, 1},
		{"plain Claim sees the response", "k1", h1, nil, true, true, []byte("r1"), nil, 1},
	}
	for _, s := range steps {
		var (
			c   idempotency.Claim
			err error
		)
		if s.name == "plain Claim sees the response" {
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				c, err = store.Claim(ctx, tx, "http", s.key, s.hash)
				return err
			})
		} else {
			c, err = claim(s.key, s.hash, s.resp, s.commit)
		}
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("%s: err = %v, want %v", s.name, err, s.wantErr)
		}
		if c.Duplicate != s.wantDuplicate || !bytes.Equal(c.Response, s.wantResponse) {
			t.Fatalf("%s: claim = %+v, want duplicate=%v response=%q", s.name, c, s.wantDuplicate, s.wantResponse)
		}
		if got := effects(t, pool, s.key); got != s.wantEffects {
			t.Fatalf("%s: effects = %d, want %d", s.name, got, s.wantEffects)
		}
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := store.ClaimWithResponse(ctx, tx, "http", "", h1, nil)
		return err
	}); !errors.Is(err, idempotency.ErrInvalidKey) {
		t.Fatalf("empty key: %v, want ErrInvalidKey", err)
	}
}

// TestClaimWithResponseTakesOverExpired: taking over an expired record
// replaces its response with the new claim's.
func TestClaimWithResponseTakesOverExpired(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	store := newStore(t, idempotency.WithRetention(time.Microsecond))
	for _, resp := range []string{"old", "new"} {
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			c, err := store.ClaimWithResponse(ctx, tx, "http", "k", []byte(resp), []byte(resp))
			if err == nil && c.Duplicate {
				t.Fatalf("%s: duplicate of an expired record", resp)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	var got []byte
	if err := pool.QueryRow(ctx, `SELECT response FROM choreo_idempotency WHERE scope = 'http' AND key = 'k'`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if string(got) != "new" {
		t.Fatalf("response = %q, want the takeover's", got)
	}
}

// TestClaimWithResponseConcurrent: of many concurrent claims of one key with
// different responses, one does the work and every other one gets its
// response.
func TestClaimWithResponseConcurrent(t *testing.T) {
	pool := setupWide(t, 12)
	ctx := context.Background()
	store := newStore(t)
	const n = 10
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		winners   []string
		responses = map[string]int{}
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := []byte{byte('a' + i)}
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				c, err := store.ClaimWithResponse(ctx, tx, "http", "k", []byte("h"), mine)
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if c.Duplicate {
					responses[string(c.Response)]++
					return nil
				}
				winners = append(winners, string(mine))
				return effect(ctx, tx, "k")
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(winners) != 1 || effects(t, pool, "k") != 1 {
		t.Fatalf("winners = %v, effects = %d, want one", winners, effects(t, pool, "k"))
	}
	if responses[winners[0]] != n-1 || len(responses) != 1 {
		t.Fatalf("duplicates got %v, want %d times %q", responses, n-1, winners[0])
	}
}

// TestQueueNewClaim: the queued claim takes a new key with its response in
// the batch's transaction; a key that has a record (committed, or expired and
// not swept) fails the batch with ErrKeyExists and nothing queued after it is
// written; ClaimWithResponse then tells the duplicate from the reuse.
func TestQueueNewClaim(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	store := newStore(t)
	send := func(key string, hash, resp []byte) error {
		t.Helper()
		b := &pgx.Batch{}
		if err := store.QueueNewClaim(b, "http", key, hash, resp); err != nil {
			return err
		}
		b.Queue(`INSERT INTO effects (key, n) VALUES ($1, 1)
			ON CONFLICT (key) DO UPDATE SET n = effects.n + 1`, key)
		return pool.SendBatch(ctx, b).Close()
	}
	if err := send("k", []byte("h1"), []byte("r1")); err != nil {
		t.Fatalf("first: %v", err)
	}
	for _, hash := range []string{"h1", "h2"} {
		if err := send("k", []byte(hash), []byte("r2")); !errors.Is(err, idempotency.ErrKeyExists) {
			t.Fatalf("again with %s: %v, want ErrKeyExists", hash, err)
		}
	}
	if n := effects(t, pool, "k"); n != 1 {
		t.Fatalf("effects = %d, want 1: a failed claim must write nothing", n)
	}
	for _, s := range []struct {
		hash    string
		wantErr error
	}{{"h1", nil}, {"h2", idempotency.ErrKeyReused}} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			c, err := store.ClaimWithResponse(ctx, tx, "http", "k", []byte(s.hash), []byte("r3"))
			if err == nil && (!c.Duplicate || string(c.Response) != "r1") {
				t.Fatalf("%s: claim %+v, want the duplicate of r1", s.hash, c)
			}
			return err
		})
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("%s: %v, want %v", s.hash, err, s.wantErr)
		}
	}
	if err := store.QueueNewClaim(&pgx.Batch{}, "http", "", nil, nil); !errors.Is(err, idempotency.ErrInvalidKey) {
		t.Fatalf("empty key: %v, want ErrInvalidKey", err)
	}

	expiring := newStore(t, idempotency.WithRetention(time.Microsecond))
	b := &pgx.Batch{}
	if err := expiring.QueueNewClaim(b, "http", "x", []byte("h"), []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	b = &pgx.Batch{}
	if err := expiring.QueueNewClaim(b, "http", "x", []byte("h"), []byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := pool.SendBatch(ctx, b).Close(); !errors.Is(err, idempotency.ErrKeyExists) {
		t.Fatalf("expired record: %v, want ErrKeyExists (ClaimWithResponse takes it over)", err)
	}
}

// TestQueueNewClaimConcurrent: of many batches claiming one key at once,
// exactly one writes its effect; the others fail with ErrKeyExists.
func TestQueueNewClaimConcurrent(t *testing.T) {
	pool := setupWide(t, 12)
	ctx := context.Background()
	store := newStore(t)
	const n = 10
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		ok     int
		exists int
	)
	for range n {
		wg.Go(func() {
			b := &pgx.Batch{}
			if err := store.QueueNewClaim(b, "http", "k", []byte("h"), []byte("r")); err != nil {
				t.Error(err)
				return
			}
			b.Queue(`INSERT INTO effects (key, n) VALUES ('k', 1) ON CONFLICT (key) DO UPDATE SET n = effects.n + 1`)
			err := pool.SendBatch(ctx, b).Close()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, idempotency.ErrKeyExists):
				exists++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok != 1 || exists != n-1 || effects(t, pool, "k") != 1 {
		t.Fatalf("ok %d, exists %d, effects %d; want 1, %d, 1", ok, exists, effects(t, pool, "k"), n-1)
	}
}
