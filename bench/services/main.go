// Command services measures the payment and inventory services on this machine and
// prints the figures next to their limits measured in the same run:
//
//   - payment charge step: the idempotency claim and paymentsvc's order.created handler
//     (read order, SELECT customer FOR UPDATE, INSERT order, UPDATE balance, INSERT ledger,
//     outbox row) in one transaction, COMMIT; with 1 and 8 workers;
//   - inventory reserve step: the idempotency claim and inventorysvc's payment.authorized
//     handler (lock two SKU rows in order, conditional UPDATE, INSERT reservation + items,
//     outbox row), COMMIT; with 1 and 8 workers;
//   - pgbench running the same SQL statements per transaction with the same client counts:
//     the database's limit for that work;
//   - the payment service end to end, in process, on an in-process kfake broker: N
//     order.created records produced at once, time until N answers are on
//     payments.events (consumer chain with Redis lock and fencing, transaction, outbox
//     relay).
//
// Usage:
//
//	go run ./bench/services [-duration 5s] [-workers 1,8] [-orders 3000]
//
// It needs Postgres (-pg, default $CHOREO_TEST_POSTGRES_DSN or
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable), Redis (-redis, default
// $CHOREO_TEST_REDIS_ADDR or 127.0.0.1:6379; "none" runs without locks) and pgbench on
// PATH; it creates and drops its own databases.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/inventory/inventorysvc"
	"github.com/choreo-saga/choreo/services/payment/paymentsvc"
)

type config struct {
	pg       string
	redis    string
	duration time.Duration
	workers  []int
	orders   int
}

func main() {
	var c config
	var workers string
	flag.StringVar(&c.pg, "pg", benchutil.DefaultPostgresDSN(), "Postgres DSN of a database allowed to CREATE DATABASE")
	flag.StringVar(&c.redis, "redis", benchutil.DefaultRedisAddr(), `Redis address for the end-to-end run ("none": no locks)`)
	flag.DurationVar(&c.duration, "duration", 5*time.Second, "duration of each step run")
	flag.StringVar(&workers, "workers", "1,8", "concurrent workers (and pgbench clients) per step run")
	flag.IntVar(&c.orders, "orders", 3000, "orders sent through the payment service end to end")
	flag.Parse()
	var err error
	if c.workers, err = benchutil.ParseInts(workers, 1); err != nil {
		fmt.Fprintln(os.Stderr, "bench/services: -workers:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "bench/services:", err)
		os.Exit(1)
	}
}

type row struct {
	what    string
	workers int
	perSec  float64
	limit   float64 // pgbench tps of the same SQL, 0 if not applicable
}

func run(ctx context.Context, c config) error {
	if err := benchutil.RequirePgbench(); err != nil {
		return err
	}
	dsn, drop, err := benchutil.CreateDB(ctx, c.pg, "choreo_bench_services")
	if err != nil {
		return err
	}
	defer drop()
	pool, err := pgxpool.New(ctx, dsn+"&pool_max_conns=32")
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := setup(ctx, pool); err != nil {
		return err
	}

	ob, err := outbox.New()
	if err != nil {
		return err
	}
	quiet := slog.New(slog.DiscardHandler)
	ph, err := paymentsvc.NewHandlers(nil, ob, paymentsvc.Config{}, quiet, nil)
	if err != nil {
		return err
	}
	ih, err := inventorysvc.NewHandlers(nil, ob, inventorysvc.Config{ReservationTTL: time.Hour}, quiet, nil)
	if err != nil {
		return err
	}
	store, err := idempotency.NewStore()
	if err != nil {
		return err
	}

	var rows []row
	for _, w := range c.workers {
		n, err := step(ctx, pool, store, w, c.duration, "payment", app.Decoded(ph.OrderCreated), func(i int64) (event.Event, error) {
			id := fmt.Sprintf("o-%d-%d", w, i)
			return event.New(events.SourceOrder, events.OrderCreated, id, events.OrderCreatedV1{
				OrderID: id, CustomerID: fmt.Sprintf("c-%d", 1+i%100), Amount: 100,
				Items: []events.Item{{SKU: "sku-1", Qty: 1}}})
		})
		if err != nil {
			return fmt.Errorf("payment step: %w", err)
		}
		limit, err := benchutil.Pgbench{DSN: dsn, Script: paymentScript, Clients: w, Duration: c.duration}.Run(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, row{"payment charge step (handler tx)", w, n, limit.TPS})
	}
	for _, w := range c.workers {
		// Inventory reserves only for orders the order service announced: each order is
		// announced (its inventory_orders row, as OrderCreated writes it) in the same
		// transaction, and the pgbench script does the same, so the limit stays comparable.
		reserve := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			if _, err := tx.Exec(ctx, `INSERT INTO inventory_orders (order_id, announced) VALUES ($1, true)`, ev.Subject); err != nil {
				return err
			}
			return app.Decoded(ih.PaymentAuthorized)(ctx, tx, ev)
		}
		n, err := step(ctx, pool, store, w, c.duration, "inventory", reserve, func(i int64) (event.Event, error) {
			id := fmt.Sprintf("r-%d-%d", w, i)
			a, b := 1+i%20, 1+(i+7)%20
			return event.New(events.SourcePayment, events.PaymentAuthorized, id, events.PaymentV1{
				OrderID: id, CustomerID: "c-1", Amount: 100,
				Items: []events.Item{{SKU: fmt.Sprintf("sku-%d", a), Qty: 1}, {SKU: fmt.Sprintf("sku-%d", b), Qty: 1}}})
		})
		if err != nil {
			return fmt.Errorf("inventory step: %w", err)
		}
		limit, err := benchutil.Pgbench{DSN: dsn, Script: inventoryScript, Clients: w, Duration: c.duration}.Run(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, row{"inventory reserve step (handler tx)", w, n, limit.TPS})
	}
	e2e, err := endToEnd(ctx, c)
	if err != nil {
		return fmt.Errorf("end to end: %w", err)
	}
	rows = append(rows, row{fmt.Sprintf("payment service end to end (kfake, %d orders)", c.orders), 0, e2e, 0})

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measurement\tworkers\tevents/s\tpgbench same SQL tx/s\tof limit\t")
	for _, r := range rows {
		w, lim, pct := "per partition", "-", "-"
		if r.workers > 0 {
			w = strconv.Itoa(r.workers)
		}
		if r.limit > 0 {
			lim, pct = fmt.Sprintf("%.0f", r.limit), fmt.Sprintf("%.0f%%", 100*r.perSec/r.limit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t\n", r.what, w, r.perSec, lim, pct)
	}
	return tw.Flush()
}

func setup(ctx context.Context, pool *pgxpool.Pool) error {
	if err := migrate.Up(ctx, pool); err != nil {
		return err
	}
	if err := app.MigrateSQL(ctx, pool, "payment", paymentsvc.Schema); err != nil {
		return err
	}
	if err := app.MigrateSQL(ctx, pool, "inventory", inventorysvc.Schema); err != nil {
		return err
	}
	cs, _ := paymentsvc.ParseCustomers("c-1..c-100:1000000000000:1000000")
	if err := paymentsvc.Seed(ctx, pool, cs); err != nil {
		return err
	}
	st, _ := inventorysvc.ParseStock("sku-1..sku-20:1000000000000")
	return inventorysvc.Seed(ctx, pool, st)
}

// step runs what consumer.Idempotent runs for each event (claim + handler in one
// transaction) with workers goroutines for d, and returns the committed events per second.
func step(ctx context.Context, pool *pgxpool.Pool, store *idempotency.Store, workers int, d time.Duration,
	scope string, h consumer.TxHandler, next func(i int64) (event.Event, error)) (float64, error) {
	var (
		seq  atomic.Int64
		done atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
	)
	deadline := time.Now().Add(d)
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				ev, err := next(seq.Add(1))
				if err == nil {
					err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						if _, err := store.Claim(ctx, tx, "bench/"+scope, ev.ID, idempotency.Hash([]byte(ev.Type), ev.Data)); err != nil {
							return err
						}
						return h(ctx, tx, ev)
					})
				}
				if err != nil {
					mu.Lock()
					ferr = errors.Join(ferr, err)
					mu.Unlock()
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), ferr
}

// The SQL of one payment charge step, as the handler sends it.
const paymentScript = `\set cid random(1, 100)
\set oid random(1, 2000000000)
BEGIN;
INSERT INTO choreo_idempotency (scope, key, request_hash, expires_at) VALUES ('pgbench/payment', 'k-' || :oid || '-' || :client_id, '\x00', now() + interval '7 days') ON CONFLICT DO NOTHING;
SELECT (SELECT status FROM payment_orders WHERE order_id = 'pg-' || :oid || '-' || :client_id), (SELECT outcome FROM payment_order_outcomes WHERE order_id = 'pg-' || :oid || '-' || :client_id);
SELECT balance, charge_limit FROM payment_customers WHERE id = 'c-' || :cid FOR UPDATE;
INSERT INTO payment_orders (order_id, customer_id, amount, status, charged_amount, reason) VALUES ('pg-' || :oid || '-' || :client_id, 'c-' || :cid, 100, 'authorized', 100, '') ON CONFLICT (order_id) DO NOTHING;
UPDATE payment_customers SET balance = balance - 100 WHERE id = 'c-' || :cid;
INSERT INTO payment_ledger (order_id, kind, customer_id, amount, event_id) VALUES ('pg-' || :oid || '-' || :client_id, 'charge', 'c-' || :cid, 100, 'e') ON CONFLICT DO NOTHING;
INSERT INTO choreo_outbox (topic, key, headers, payload) VALUES ('payments.events', 'pg-' || :oid, '[["ce_id","x"],["ce_type","payment.authorized"]]', '\x7b7d');
END;
`

// The SQL of one inventory reserve step (two SKUs), as the handler sends it.
const inventoryScript = `\set a random(1, 20)
\set b random(1, 20)
\set oid random(1, 2000000000)
BEGIN;
INSERT INTO choreo_idempotency (scope, key, request_hash, expires_at) VALUES ('pgbench/inventory', 'k-' || :oid || '-' || :client_id, '\x00', now() + interval '7 days') ON CONFLICT DO NOTHING;
INSERT INTO inventory_orders (order_id, announced) VALUES ('pg-' || :oid || '-' || :client_id, true) ON CONFLICT DO NOTHING;
SELECT announced, held_event_id IS NOT NULL, outcome FROM inventory_orders WHERE order_id = 'pg-' || :oid || '-' || :client_id FOR UPDATE;
SELECT status, cancel_seen FROM inventory_reservations WHERE order_id = 'pg-' || :oid || '-' || :client_id FOR UPDATE;
SELECT sku, available FROM inventory_stock WHERE sku = ANY (ARRAY['sku-' || least(:a, :b), 'sku-' || greatest(:a, :b)]) ORDER BY sku FOR UPDATE;
UPDATE inventory_stock s SET available = s.available - 1 WHERE s.sku = ANY (ARRAY['sku-' || :a, 'sku-' || :b]) AND s.available >= 1;
INSERT INTO inventory_reservations (order_id, status, reason, expires_at) VALUES ('pg-' || :oid || '-' || :client_id, 'reserved', '', now() + interval '1 hour') ON CONFLICT (order_id) DO NOTHING;
INSERT INTO inventory_reservation_items (order_id, sku, qty) VALUES ('pg-' || :oid || '-' || :client_id, 'sku-' || :a, 1), ('pg-' || :oid || '-' || :client_id, 'sku-' || :b, 1) ON CONFLICT DO NOTHING;
INSERT INTO choreo_outbox (topic, key, headers, payload) VALUES ('inventory.events', 'pg-' || :oid, '[["ce_id","x"],["ce_type","stock.reserved"]]', '\x7b7d');
END;
`

// endToEnd runs the payment service on kfake and returns answered orders per second.
func endToEnd(ctx context.Context, c config) (float64, error) {
	dsn, drop, err := benchutil.CreateDB(ctx, c.pg, "choreo_bench_payment_e2e")
	if err != nil {
		return 0, err
	}
	defer drop()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return 0, err
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	redisAddr := c.redis
	if redisAddr == "none" {
		redisAddr = ""
	}
	cs, _ := paymentsvc.ParseCustomers("c-1..c-100:1000000000000:1000000")
	cfg := paymentsvc.Config{
		App: app.Config{Service: "payment", DatabaseURL: dsn, RedisAddr: redisAddr, KafkaBrokers: brokers,
			KafkaPartitions: 6, DatabaseMaxConns: 32, HTTPAddr: ln.Addr().String(), LogLevel: slog.LevelError,
			ShutdownTimeout: time.Minute},
		Group:     "payment",
		Customers: cs,
		AppOptions: []app.Option{app.WithListener(ln), app.WithoutSignals(), app.WithLogOutput(io.Discard),
			app.WithLockOptions(lock.WithNamespace(fmt.Sprintf("bench-%d:", time.Now().UnixNano())))},
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- paymentsvc.Run(runCtx, cfg) }()
	defer func() { cancel(); <-done }()

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(events.TopicPayments),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	// Wait until the service created its topics and joined its group: one warm-up order.
	warm, err := orderRecord("warm-up", 1)
	if err != nil {
		return 0, err
	}
	if err := awaitTopic(ctx, cl, warm); err != nil {
		return 0, err
	}
	if _, err := drain(ctx, cl, 1); err != nil {
		return 0, err
	}

	recs := make([]*kgo.Record, c.orders)
	for i := range recs {
		if recs[i], err = orderRecord(fmt.Sprintf("e2e-%d", i), i); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, err
	}
	if _, err := drain(ctx, cl, c.orders); err != nil {
		return 0, err
	}
	return float64(c.orders) / time.Since(start).Seconds(), nil
}

func orderRecord(id string, i int) (*kgo.Record, error) {
	ev, err := event.New(events.SourceOrder, events.OrderCreated, id, events.OrderCreatedV1{
		OrderID: id, CustomerID: fmt.Sprintf("c-%d", 1+i%100), Amount: 100, Items: []events.Item{{SKU: "sku-1", Qty: 1}}})
	if err != nil {
		return nil, err
	}
	return event.ToRecord(events.TopicOrders, ev)
}

// awaitTopic produces r, retrying until the service has created the topic.
func awaitTopic(ctx context.Context, cl *kgo.Client, r *kgo.Record) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := cl.ProduceSync(ctx, r).FirstErr()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// drain reads n records, bounded by a generous deadline.
func drain(ctx context.Context, cl *kgo.Client, n int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return got, fmt.Errorf("got %d of %d answers: %w", got, n, ctx.Err())
		}
		got += fs.NumRecords()
	}
	return got, nil
}
