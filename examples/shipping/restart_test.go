package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/event"
)

// envRunMain makes the test binary run the service's main instead of the tests: the
// kill -9 test starts the service as a process of its own.
const envRunMain = "SHIPPING_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// startProcess runs the service's main in a child process on infra, configured from the
// environment as in production.
func startProcess(t *testing.T, infra apptest.Infra) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envRunMain+"=1",
		"DATABASE_URL="+infra.DatabaseURL, "REDIS_ADDR="+infra.RedisAddr,
		"KAFKA_BROKERS="+infra.Brokers[0], "KAFKA_PARTITIONS=3", "KAFKA_SESSION_TIMEOUT=6s",
		"KAFKA_INSTANCE_ID=none", "HTTP_ADDR=127.0.0.1:0", "ADMIN_ADDR=none", "LOG_LEVEL=warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// processView reads what the child processes left: the database and the cluster.
type processView struct {
	*apptest.Kafka
	t    *testing.T
	pool *pgxpool.Pool
}

func (v processView) Count(query string, args ...any) int {
	v.t.Helper()
	var n int
	if err := v.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		v.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// The service is killed with SIGKILL mid-stream and started again on the same database
// and cluster, and every input is delivered once more: each order still gets exactly
// one shipment and one shipment.scheduled.
func TestKillAndRestart(t *testing.T) {
	infra := apptest.NewInfra(t)
	first := startProcess(t, infra)
	pool, err := pgxpool.New(context.Background(), infra.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	v := processView{Kafka: apptest.NewKafka(t, infra.Brokers), t: t, pool: pool}

	const orders = 60
	prefix := randomHex(t, 4) // order ids, and so lock keys, of this run only
	var evs []event.Event
	for i := range orders {
		id := fmt.Sprintf("o-%s-%03d", prefix, i)
		evs = append(evs, apptest.NewEvent(t, "orders", typeOrderConfirmed, id, orderConfirmed{OrderID: id}))
	}
	// The service creates the topics at start; wait for its table, then produce.
	apptest.WaitFor(t, "the shipments table", func() bool {
		var ok bool
		return pool.QueryRow(context.Background(), `SELECT to_regclass('shipments') IS NOT NULL`).Scan(&ok) == nil && ok
	})
	apptest.WaitFor(t, "the orders topic", func() bool {
		return v.Client().ProduceSync(context.Background(), recordOf(t, evs[0])).FirstErr() == nil
	})
	v.Produce(ordersTopic, evs[1:]...)
	apptest.WaitFor(t, "the first shipments", func() bool { return v.Count(`SELECT count(*) FROM shipments`) > 0 })
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	t.Logf("killed with %d of %d shipments", v.Count(`SELECT count(*) FROM shipments`), orders)

	startProcess(t, infra)
	v.Produce(ordersTopic, evs...) // every input once more, same event ids
	apptest.WaitFor(t, "a shipment per order and an empty outbox", func() bool {
		return v.Count(`SELECT count(*) FROM shipments`) == orders && v.Count(`SELECT count(*) FROM choreo_outbox`) == 0
	})
	apptest.WaitFor(t, "a shipment.scheduled per order", func() bool { return len(v.Events(shippingTopic)) == orders })
	checkOnePerOrder(t, v, orders)
}

func recordOf(t *testing.T, ev event.Event) *kgo.Record {
	t.Helper()
	r, err := event.ToRecord(ordersTopic, ev)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
