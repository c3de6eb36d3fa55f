// Command order measures the order service's two hot paths on this machine and prints
// them next to their limits measured in the same run:
//
//   - POST /orders through the HTTP API (JSON decoding, validation, the
//     Idempotency-Key claim with its response, INSERT order + history + outbox row,
//     all in one pipelined round trip), with 1, 8 and 32 concurrent clients over
//     loopback;
//   - one saga step in the order consumer's business handler (idempotency claim,
//     SELECT ... FOR UPDATE, UPDATE through the transition table, history row, outbox
//     row, COMMIT: stock.reserved -> CONFIRMED), with 1 and 8 workers;
//   - pgbench running the same SQL statements per transaction with the same client
//     counts: the database's limit for that work (one statement per round trip in
//     BEGIN/COMMIT: the service's single round trip can beat it).
//
// Usage:
//
//	go run ./bench/order [-duration 5s] [-clients 1,8,32] [-workers 1,8]
//
// It needs Postgres (-pg, default $CHOREO_TEST_POSTGRES_DSN or
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable) and pgbench on PATH; it
// creates and drops its own database. Tracing is off (no-op provider), as in a service without an
// exporter.
package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

type config struct {
	pg       string
	duration time.Duration
	clients  []int
	workers  []int
	orders   int
}

func main() {
	var c config
	var clients, workers string
	flag.StringVar(&c.pg, "pg", benchutil.DefaultPostgresDSN(), "Postgres DSN of a database allowed to CREATE DATABASE")
	flag.DurationVar(&c.duration, "duration", 5*time.Second, "duration of each run")
	flag.StringVar(&clients, "clients", "1,8,32", "concurrent HTTP clients per API run")
	flag.StringVar(&workers, "workers", "1,8", "concurrent workers per handler run")
	flag.IntVar(&c.orders, "orders", 60000, "PENDING orders prepared for the handler runs")
	flag.Parse()
	var err error
	if c.clients, err = benchutil.ParseInts(clients, 1); err == nil {
		c.workers, err = benchutil.ParseInts(workers, 1)
	}
	if err == nil {
		err = run(context.Background(), c)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/order:", err)
		os.Exit(1)
	}
}

// result of one run.
type result struct {
	ops      int
	elapsed  time.Duration
	p50, p99 time.Duration
}

func (r result) rate() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// measure runs op in n goroutines for d and collects per-op latencies. op gets the
// goroutine index and returns false when it has nothing left to do.
func measure(n int, d time.Duration, op func(g int) (bool, error)) (result, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		lat   []time.Duration
		first error
		stop  atomic.Bool
	)
	start := time.Now()
	for g := range n {
		wg.Go(func() {
			var mine []time.Duration
			for !stop.Load() && time.Since(start) < d {
				t0 := time.Now()
				more, err := op(g)
				if err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
					stop.Store(true)
					break
				}
				if !more {
					stop.Store(true)
					break
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return result{}, first
	}
	if len(lat) == 0 {
		return result{}, errors.New("no operation completed")
	}
	slices.Sort(lat)
	return result{ops: len(lat), elapsed: elapsed, p50: benchutil.Percentile(lat, 0.5), p99: benchutil.Percentile(lat, 0.99)}, nil
}

func run(ctx context.Context, c config) error {
	if err := benchutil.RequirePgbench(); err != nil {
		return err
	}
	dsn, drop, err := benchutil.CreateDB(ctx, c.pg, "choreo_bench_order")
	if err != nil {
		return err
	}
	defer drop()
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	pcfg.MaxConns = int32(max(slices.Max(c.clients), slices.Max(c.workers)) + 4)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := ordersvc.Migrate(ctx, pool); err != nil {
		return err
	}
	svc, err := ordersvc.New(pool, ordersvc.Settings{}, ordersvc.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	var pgVersion string
	_ = pool.QueryRow(ctx, "SHOW server_version").Scan(&pgVersion)
	fmt.Printf("order service benchmark — %d CPUs, Postgres %s, %s per run\n\n", runtime.NumCPU(), pgVersion, c.duration)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "what\tconcurrency\trate\tp50\tp99\t")
	row := func(what string, n int, r result, unit string) {
		fmt.Fprintf(tw, "%s\t%d\t%.0f %s\t%s\t%s\t\n", what, n, r.rate(), unit, r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond))
	}
	limit := func(what string, n int, tps float64, unit string) {
		fmt.Fprintf(tw, "%s\t%d\t%.0f %s\t\t\t\n", what, n, tps, unit)
	}

	// 1. POST /orders over HTTP, and the same SQL through pgbench.
	body := []byte(`{"customer_id":"c-1","items":[{"sku":"sku-1","qty":2},{"sku":"sku-2","qty":1}],"amount":4200}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	var seq atomic.Int64
	post := func(withKey bool) func(int) (bool, error) {
		return func(int) (bool, error) {
			req, err := http.NewRequest(http.MethodPost, base+"/orders", bytes.NewReader(body))
			if err != nil {
				return false, err
			}
			req.Header.Set("Content-Type", "application/json")
			if withKey {
				req.Header.Set("Idempotency-Key", "bench-"+strconv.FormatInt(seq.Add(1), 10))
			}
			resp, err := client.Do(req)
			if err != nil {
				return false, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				return false, fmt.Errorf("POST /orders: status %d", resp.StatusCode)
			}
			return true, nil
		}
	}
	for _, n := range c.clients {
		r, err := measure(n, c.duration, post(true))
		if err != nil {
			return err
		}
		row("API: POST /orders with Idempotency-Key", n, r, "orders/s")
	}
	r, err := measure(c.clients[len(c.clients)/2], c.duration, post(false))
	if err != nil {
		return err
	}
	row("API: POST /orders without key", c.clients[len(c.clients)/2], r, "orders/s")
	for _, n := range c.clients {
		r, err := benchutil.Pgbench{DSN: dsn, Script: createScript, Clients: n, Duration: c.duration}.Run(ctx)
		if err != nil {
			return err
		}
		limit("limit: pgbench, the same SQL (claim with response, order, history, outbox)", n, r.TPS, "tx/s")
	}

	// 2. One saga step in the consumer's business handler, and its SQL through pgbench.
	if _, err := pool.Exec(ctx, "TRUNCATE orders, order_history, choreo_outbox, choreo_idempotency"); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO orders (id, customer_id, items, amount, state, deadline_at)
		SELECT gen_random_uuid(), 'c-1', '[{"sku":"sku-1","qty":2}]', 4200, 'PENDING', now() + interval '1 hour'
		FROM generate_series(1, $1)`, c.orders); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "ANALYZE orders"); err != nil {
		return err
	}
	rows, err := pool.Query(ctx, "SELECT id::text FROM orders")
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	store, err := idempotency.NewStore()
	if err != nil {
		return err
	}
	var next atomic.Int64
	step := func(int) (bool, error) {
		i := int(next.Add(1)) - 1
		if i >= len(ids) {
			return false, nil
		}
		ev, err := event.New(events.SourceInventory, events.StockReserved, ids[i],
			events.StockV1{OrderID: ids[i], Items: []events.Item{{SKU: "sku-1", Qty: 2}}})
		if err != nil {
			return false, err
		}
		// What consumer.Idempotent does around the business handler.
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := store.Claim(ctx, tx, "order/order", ev.ID, idempotency.Hash([]byte(ev.Type), ev.Data)); err != nil {
				return err
			}
			return svc.HandleEvent(ctx, tx, ev)
		})
		return err == nil, err
	}
	for _, n := range c.workers {
		r, err := measure(n, c.duration, step)
		if err != nil {
			return err
		}
		row("handler: stock.reserved -> CONFIRMED (claim, lock, update, history, outbox)", n, r, "events/s")
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE bench_ids AS SELECT row_number() OVER () AS n, id FROM orders; CREATE UNIQUE INDEX ON bench_ids (n)"); err != nil {
		return err
	}
	for _, n := range c.workers {
		r, err := benchutil.Pgbench{DSN: dsn, Script: fmt.Sprintf(stepScript, len(ids)), Clients: n, Duration: c.duration}.Run(ctx)
		if err != nil {
			return err
		}
		limit("limit: pgbench, the same SQL", n, r.TPS, "tx/s")
	}
	return tw.Flush()
}

// createScript is the SQL of one POST /orders with an Idempotency-Key, one statement per
// round trip in an explicit transaction (ordersvc pipelines them in one round trip, an
// implicit transaction, unless the key already has a record).
const createScript = `BEGIN;
INSERT INTO choreo_idempotency (scope, key, request_hash, expires_at, response) VALUES ('bench/create', gen_random_uuid()::text, '\x00', now() + interval '7 days', '\x00');
INSERT INTO orders (id, customer_id, items, amount, state, deadline_at) VALUES (gen_random_uuid(), 'c-1', '[{"sku":"sku-1","qty":2},{"sku":"sku-2","qty":1}]', 4200, 'PENDING', now() + interval '2 minutes') RETURNING id AS oid \gset
INSERT INTO order_history (order_id, from_state, to_state, cause_event_type) VALUES (:oid, '', 'PENDING', 'command.create');
INSERT INTO choreo_outbox (topic, key, headers, payload) VALUES ('orders.events', 'k', '[["ce_id","x"],["ce_type","order.created"]]', '\x7b226f726465725f6964223a2278227d');
COMMIT;
`

// stepScript is the SQL of one saga step in the order handler (%d: number of orders).
const stepScript = `\set n random(1, %d)
BEGIN;
INSERT INTO choreo_idempotency (scope, key, request_hash, expires_at) VALUES ('bench/step', gen_random_uuid()::text, '\x00', now() + interval '7 days');
SELECT o.id AS oid, o.state FROM orders o JOIN bench_ids b ON b.id = o.id WHERE b.n = :n FOR UPDATE OF o \gset
UPDATE orders SET stock_reserved = true, updated_at = now(), version = version + 1 WHERE id = :oid;
INSERT INTO order_history (order_id, from_state, to_state, cause_event_id, cause_event_type) VALUES (:oid, 'PENDING', 'CONFIRMED', 'x', 'stock.reserved');
INSERT INTO choreo_outbox (topic, key, headers, payload) VALUES ('orders.events', 'k', '[["ce_id","x"],["ce_type","order.confirmed"]]', '\x7b226f726465725f6964223a2278227d');
COMMIT;
`
