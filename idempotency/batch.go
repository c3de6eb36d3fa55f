package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/internal/txhook"
)

// Request is one key to claim and its request hash.
type Request struct {
	// Key is the idempotency key, 1 to MaxKeyBytes bytes.
	Key string
	// Hash is the request hash, as for Claim (nil and empty are the same).
	Hash []byte
}

// ClaimAll claims every request of one scope in tx and returns one Claim per
// request, in the order of reqs. When every key is new, the common case, it
// takes one round trip; when some have a record (duplicates, reused keys),
// a second one reads those records.
//
// The outcome is that of calling Claim for each request in sorted key order
// (byte order, as strings.Compare): a first-time claim, a Duplicate with the
// stored response, or, for the whole call, an error wrapping ErrKeyReused
// naming the first such key in key order, or ErrInvalidKey (checked before
// any round trip). On an error the transaction may already hold claims of
// other keys of reqs; roll it back. A key that appears more than once in
// reqs is claimed by its first occurrence; the later ones are duplicates of
// it (with its stored response, if it was a duplicate itself) when their
// hash is equal, else ErrKeyReused.
//
// The rows are inserted in sorted key order, so transactions claiming
// overlapping sets of keys, with ClaimAll or with Claim in the same order,
// wait for each other instead of deadlocking. As with Claim, a key claimed
// by a transaction that is still open makes ClaimAll wait until it ends.
//
// Keys that these two statements cannot decide take Claim's extra round
// trips, one key at a time, in key order: an expired record to take over,
// and a key whose record was deleted (swept) between them. Because such a
// takeover comes after the inserts, a transaction taking over the same
// expired record with Claim while waiting for one of our new keys can,
// rarely, deadlock with ClaimAll (Postgres aborts one of them with SQLSTATE
// 40P01, which is retryable).
//
// Like Claim, ClaimAll is designed for READ COMMITTED. An empty reqs
// returns nil, nil without a round trip.
func (s *Store) ClaimAll(ctx context.Context, tx pgx.Tx, scope string, reqs []Request) ([]Claim, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	// order holds the indexes of reqs sorted by key; stable, so that the
	// first occurrence of a key comes first.
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(reqs[a].Key, reqs[b].Key) })
	keys := make([]string, 0, len(reqs))
	hashes := make([][]byte, 0, len(reqs))
	for _, i := range order {
		r := reqs[i]
		if err := checkKey(scope, r.Key); err != nil {
			return nil, err
		}
		if n := len(keys); n > 0 && keys[n-1] == r.Key {
			continue
		}
		keys = append(keys, r.Key)
		hashes = append(hashes, nonNil(r.Hash))
	}

	seen, err := s.claimAll(ctx, tx, scope, keys, hashes, txhook.Leading(ctx))
	if err != nil {
		var lerr leadingError
		if errors.As(err, &lerr) {
			return nil, lerr.err
		}
		return nil, err
	}

	claims := make([]Claim, len(reqs))
	first := -1 // index in reqs of the first occurrence of the current key
	for _, i := range order {
		r := reqs[i]
		if first >= 0 && reqs[first].Key == r.Key {
			if !bytes.Equal(r.Hash, reqs[first].Hash) {
				return nil, errKeyReused(scope, r.Key)
			}
			claims[i] = Claim{Duplicate: true, Response: bytes.Clone(claims[first].Response)}
			continue
		}
		first = i
		// A key absent from seen gets Claim's full passes.
		if claims[i], err = s.claim(ctx, tx, scope, r.Key, nonNil(r.Hash), nil, seen[r.Key], nil); err != nil {
			return nil, err
		}
	}
	return claims, nil
}

// claimAll runs claimAllSQL for keys (sorted, distinct), after the leading
// statements in the same round trip (see query; their error is a
// leadingError), then, if it did not take every key, lookupAllSQL for the
// others, and returns what it saw of each key: taken, or its record. A key
// missing from both (its record was deleted in between) is left out.
func (s *Store) claimAll(ctx context.Context, tx pgx.Tx, scope string, keys []string, hashes [][]byte, leading []txhook.Stmt) (map[string]*record, error) {
	seen := make(map[string]*record, len(keys))
	err := query(ctx, tx, leading, s.claimAllSQL, []any{scope, keys, hashes, s.retention.Microseconds()}, func(rows pgx.Rows) error {
		for rows.Next() {
			var key string
			if err := rows.Scan(&key); err != nil {
				return err
			}
			seen[key] = &record{claimed: true}
		}
		return rows.Err()
	})
	if err == nil && len(seen) < len(keys) {
		// The keys that have a record: committed before the INSERT, or by a
		// concurrent claim that it waited for, which this new statement sees.
		rest := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return seen[k] != nil })
		err = query(ctx, tx, nil, s.lookupAllSQL, []any{scope, rest}, func(rows pgx.Rows) error {
			for rows.Next() {
				var (
					key string
					r   record
				)
				if err := rows.Scan(append([]any{&key}, r.fields()...)...); err != nil {
					return err
				}
				seen[key] = &r
			}
			return rows.Err()
		})
	}
	var lerr leadingError
	switch {
	case errors.As(err, &lerr):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("idempotency: claim %d keys in %s: %w", len(keys), scope, err)
	}
	return seen, nil
}

// nonNil returns h, or an empty hash for nil: request_hash is NOT NULL, and
// nil and empty are the same hash.
func nonNil(h []byte) []byte {
	if h == nil {
		return []byte{}
	}
	return h
}
