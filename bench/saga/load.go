package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/bench/internal/orderwatch"
)

// sent is one order the generator placed.
type sent struct {
	due time.Time // when the schedule said to send it: latencies start here
	id  string    // from the POST answer; "" when it failed
}

// generator places orders open-loop: request i of a rate goes out at start + i/rate
// whatever happened to the earlier ones, each on its own goroutine over a shared pool
// of keep-alive connections, up to maxInFlight at once. When that bound or the
// machine holds it back, it records how late it sent (lag) instead of slowing down.
// It opens at most app.DefaultMaxConnsPerClient connections to each order instance, the
// most the order API keeps open for one client address: beyond it the API closes new
// connections unread, and the generator would measure its own reconnections.
type generator struct {
	urls        []string // order instances' base URLs, used in turn
	client      *http.Client
	maxInFlight int
	skus        int
	customers   int
	rng         *rand.Rand
	next        atomic.Uint64
}

func newGenerator(urls []string, maxInFlight, skus, customers int, seed uint64) *generator {
	tr := &http.Transport{
		MaxIdleConns:        maxInFlight,
		MaxIdleConnsPerHost: maxInFlight,
		MaxConnsPerHost:     min(maxInFlight, app.DefaultMaxConnsPerClient),
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &generator{urls: urls, client: &http.Client{Transport: tr, Timeout: 30 * time.Second},
		maxInFlight: maxInFlight, skus: skus, customers: customers, rng: rand.New(rand.NewPCG(seed, seed^0x5a5a))}
}

// body is a successful order: a stocked SKU, a customer with funds, a small amount.
func (g *generator) body() []byte {
	qty := 1 + g.rng.IntN(3)
	b, _ := json.Marshal(map[string]any{
		"customer_id": fmt.Sprintf("c-%d", 1+g.rng.IntN(g.customers)),
		"items":       []map[string]any{{"sku": fmt.Sprintf("sku-%d", 1+g.rng.IntN(g.skus)), "qty": qty}},
		"amount":      int64(qty) * int64(500+g.rng.IntN(4500)),
	})
	return b
}

// burst is what one rate's schedule produced.
type burst struct {
	orders   []*sent
	started  time.Time
	lastSent time.Time
	late     int           // requests sent more than 10 ms after their due time
	maxLag   time.Duration // the latest one
	errors   int
	shed     int // POSTs answered 503 by the order API's admission control: not sent again
	firstErr string
}

// run sends rate orders per second for d and returns once every request answered.
func (g *generator) run(ctx context.Context, rate float64, d time.Duration) *burst {
	n := int(rate * d.Seconds())
	b := &burst{orders: make([]*sent, n), started: time.Now()}
	interval := time.Duration(float64(time.Second) / rate)
	sem := make(chan struct{}, g.maxInFlight)
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for i := range n {
		due := b.started.Add(time.Duration(i) * interval)
		if w := time.Until(due); w > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(w):
			}
		}
		if ctx.Err() != nil {
			b.orders = b.orders[:i]
			break
		}
		body := g.body()
		sem <- struct{}{}
		if lag := time.Since(due); lag > 10*time.Millisecond {
			b.late++
			b.maxLag = max(b.maxLag, lag)
		}
		o := &sent{due: due}
		b.orders[i] = o
		url := g.urls[g.next.Add(1)%uint64(len(g.urls))] + "/orders"
		wg.Go(func() {
			defer func() { <-sem }()
			id, err := orderwatch.Place(ctx, g.client, url, body)
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, orderwatch.ErrShed) {
				b.shed++
				return
			}
			if err != nil {
				b.errors++
				if b.firstErr == "" {
					b.firstErr = err.Error()
				}
				return
			}
			o.id = id
		})
	}
	b.lastSent = time.Now()
	wg.Wait()
	return b
}
