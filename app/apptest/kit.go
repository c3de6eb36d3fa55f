package apptest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/lock"
)

// Kit is a service built on the kit (package app) and running in the test's process,
// started by StartKit: its App, the Kafka cluster it consumes (produce to it, read what
// the service published) and its database.
type Kit struct {
	// App is the running service.
	App *app.App
	// Kafka produces to and reads from the service's cluster.
	*Kafka
	// Pool is a pool on the service's database, for assertions.
	Pool *pgxpool.Pool
	// BaseURL is the service's HTTP server: http://host:port.
	BaseURL string
	// Logs holds the service's JSON log lines.
	Logs *LogBuffer

	t       testing.TB
	service *Service
}

// StartKit builds a service with build (the function main uses: app.New plus its
// registrations, options appended last) on in, runs it until the test ends and returns
// once it is ready. The options StartKit passes point the service at in: its Config (a
// free local HTTP port, no admin listener, 3 partitions per created topic, dynamic group
// membership, debug logs into Kit.Logs, a one-minute shutdown bound), in's Redis lock
// namespace, and no signal handling. Several StartKit calls on one Infra are instances
// of one service, sharing its database and consumer group.
func StartKit(t testing.TB, in Infra, build func(ctx context.Context, opts ...app.Option) (*app.App, error), opts ...app.Option) *Kit {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("apptest: listen: %v", err)
	}
	cfg := app.Config{
		DatabaseURL: in.DatabaseURL, RedisAddr: in.RedisAddr, KafkaBrokers: in.Brokers,
		KafkaPartitions: 3, HTTPAddr: ln.Addr().String(), LogLevel: slog.LevelDebug,
		ShutdownTimeout: time.Minute, ConsumerBatch: app.DefaultConsumerBatch,
	}
	k := &Kit{t: t, Logs: &LogBuffer{}, BaseURL: "http://" + ln.Addr().String()}
	base := []app.Option{
		app.WithConfig(cfg), app.WithListener(ln), app.WithoutSignals(), app.WithLogOutput(k.Logs),
		app.WithLockOptions(lock.WithNamespace(in.LockNamespace)),
	}
	ctx := context.Background()
	if k.App, err = build(ctx, append(base, opts...)...); err != nil {
		ln.Close()
		t.Fatalf("apptest: build the service: %v", err)
	}
	k.service = Start(t, k.BaseURL, k.App.Run)
	if k.Pool, err = pgxpool.New(ctx, in.DatabaseURL); err != nil {
		t.Fatalf("apptest: connect to the service's database: %v", err)
	}
	t.Cleanup(k.Pool.Close)
	k.Kafka = NewKafka(t, in.Brokers)
	return k
}

// Stop shuts the service down as SIGTERM does and fails the test if Run returned an
// error. Later calls do nothing; the test's end stops a service still running.
func (k *Kit) Stop() {
	k.t.Helper()
	if err := k.service.Stop(); err != nil {
		k.t.Errorf("apptest: the service stopped with %v", err)
	}
}

// Settled waits until the service's handler group (app.App.HandlerGroup) has committed
// every record of its topics and its outbox is empty: everything produced so far has
// been handled and everything the handlers published is on its topic.
func (k *Kit) Settled() {
	k.t.Helper()
	group, topics := k.App.HandlerGroup()
	k.WaitSettled(k.Pool, k.App.Outbox.TableName(), map[string][]string{group: topics})
}

// AwaitEvent waits until topic holds an event about subject and returns the first one.
func (k *Kit) AwaitEvent(topic, subject string) event.Event {
	k.t.Helper()
	var got event.Event
	WaitFor(k.t, fmt.Sprintf("an event about %s on %s", subject, topic), func() bool {
		evs := k.Events(topic)[subject]
		if len(evs) > 0 {
			got = evs[0]
		}
		return len(evs) > 0
	})
	return got
}

// AwaitRow waits until the query (one row, one integer column, e.g. a count) returns
// want.
func (k *Kit) AwaitRow(want int, query string, args ...any) {
	k.t.Helper()
	WaitFor(k.t, fmt.Sprintf("%s = %d", query, want), func() bool {
		var n int
		err := k.Pool.QueryRow(context.Background(), query, args...).Scan(&n)
		return err == nil && n == want
	})
}

// Count returns the integer the query returns (e.g. a count), failing the test on an
// error.
func (k *Kit) Count(query string, args ...any) int {
	k.t.Helper()
	var n int
	if err := k.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		k.t.Fatalf("apptest: %s: %v", query, err)
	}
	return n
}

var _ io.Writer = (*LogBuffer)(nil)
