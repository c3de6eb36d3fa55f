package app_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
)

// Two instances of one service share its database and Redis; one relay leads. With
// polling off, what either instance commits is published: the standby's Wake reaches the
// leader through the default outbox's wake channel on Redis.
func TestStandbyWakesTheLeader(t *testing.T) {
	ctx := context.Background()
	brokers := testenv.KafkaCluster(t).ListenAddrs()
	dsn := freshDSN(t)
	_, ns := testenv.Redis(t)
	service := strings.TrimSuffix(ns, ":") // the wake channel's namespace: the test's own
	var apps []*app.App
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		env := app.MapEnv(map[string]string{
			app.EnvDatabaseURL: dsn, app.EnvRedisAddr: testenv.RedisAddr(t),
			app.EnvKafkaBrokers: strings.Join(brokers, ","), app.EnvKafkaPartitions: "2",
		})
		cfg := app.LoadConfig(env, service, ln.Addr().String())
		if err := env.Err(); err != nil {
			t.Fatal(err)
		}
		a, err := app.New(ctx, cfg, app.WithListener(ln), app.WithoutSignals(), app.WithLogOutput(io.Discard),
			app.WithRelayOptions(outbox.WithPollInterval(time.Hour)))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.EnsureTopics(ctx, "widgets.out"); err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(runCtx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
		<-a.Ready()
		apps = append(apps, a)
	}

	// Each instance writes in turn; every row must be published, whichever relay leads.
	backlog := func() int {
		var n int
		if err := apps[0].Pool.QueryRow(ctx, "SELECT count(*) FROM "+apps[0].Outbox.TableName()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := range 6 {
		a := apps[i%2]
		ev, err := event.New(service, "widget.made", fmt.Sprintf("w-%d", i), map[string]int{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Outbox.InTx(ctx, a.Pool, func(ctx context.Context, tx pgx.Tx) error {
			return a.Outbox.Enqueue(ctx, tx, "widgets.out", ev)
		}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, fmt.Sprintf("instance %d's row to be published", i%2), func() bool { return backlog() == 0 })
	}
	if got := apptest.NewKafka(t, brokers).Events("widgets.out"); len(got) != 6 {
		t.Errorf("published %d entities, want 6", len(got))
	}
}
