package main

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
)

// credit is the payload of an input event: the amount to add to the account's balance.
type credit struct {
	Amount int64 `json:"amount"`
}

// workload is the input of every mode: the events in the order they are produced
// (duplicates included, as exact copies of an earlier event) and what a correct run ends
// with.
type workload struct {
	events  []event.Event
	unique  int              // distinct event ids
	balance map[string]int64 // account → sum of the amounts of its unique events
}

// accountID names account i (1-based); pgbench's script builds the same names.
func accountID(i int) string { return fmt.Sprintf("acct-%d", i) }

// genWorkload makes n events on accounts drawn uniformly from 1..accounts, with
// round(n·dup) of them duplicates: each is a copy (same id, key and payload) of a
// uniformly chosen earlier unique event, at a uniformly chosen later position. Amounts are
// 1–100. The same seed gives the same accounts, amounts and positions (event ids and times
// are fresh).
func genWorkload(n, accounts int, dup float64, seed uint64) (workload, error) {
	if n < 1 || accounts < 1 || dup < 0 || dup >= 1 {
		return workload{}, fmt.Errorf("workload: need events ≥ 1, accounts ≥ 1, 0 ≤ dup < 1 (got %d, %d, %v)", n, accounts, dup)
	}
	rng := rand.New(rand.NewPCG(seed, 0x686f74))
	dups := int(math.Round(float64(n) * dup))
	// Position 0 is always an original, so every duplicate has an earlier one to copy.
	isDup := make([]bool, n)
	for _, p := range rng.Perm(n - 1)[:min(dups, n-1)] {
		isDup[p+1] = true
	}
	w := workload{events: make([]event.Event, 0, n), balance: make(map[string]int64, accounts)}
	originals := make([]event.Event, 0, n-dups)
	for i := range n {
		if isDup[i] {
			w.events = append(w.events, originals[rng.IntN(len(originals))])
			continue
		}
		acct, amount := accountID(rng.IntN(accounts)+1), rng.Int64N(100)+1
		ev, err := event.New("hotentity", "account.credit_requested", acct, credit{Amount: amount})
		if err != nil {
			return workload{}, err
		}
		originals = append(originals, ev)
		w.events = append(w.events, ev)
		w.balance[acct] += amount
	}
	w.unique = len(originals)
	return w, nil
}

// produce writes every event of w to topic (keyed by account, so an account's events,
// duplicates included, share a partition), signed by signer (the pipelines that do not
// verify signatures ignore the header), at rate events a second if rate > 0 (else as fast
// as the client goes), and waits for every acknowledgement.
func produce(ctx context.Context, brokers []string, topic string, w workload, rate int, signer *event.Signer) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	var (
		mu    sync.Mutex
		first error
	)
	start := time.Now()
	for i, ev := range w.events {
		if rate > 0 {
			if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(d):
				}
			}
		}
		r, err := event.ToRecord(topic, ev)
		if err != nil {
			return err
		}
		signer.Sign(r)
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			mu.Lock()
			first = cmp.Or(first, err)
			mu.Unlock()
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return first
}

// newSigning returns an Ed25519 signer with a fresh key and the trusted keys that accept
// its events (source "hotentity").
func newSigning() (*event.Signer, map[string]*event.KeySet, error) {
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		return nil, nil, err
	}
	s, err := event.NewEd25519Signer(priv)
	if err != nil {
		return nil, nil, err
	}
	set, err := event.NewKeySet(s.Key())
	if err != nil {
		return nil, nil, err
	}
	return s, map[string]*event.KeySet{"hotentity": set}, nil
}
