package app_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/internal/testenv"
)

// TestRetention sets both retentions from their variables and checks them against a real
// database: an idempotency record claimed through the App's store expires after
// IDEMPOTENCY_RETENTION (its expires_at) and the sweeper deletes it once expired; archive
// rows older than DEAD_LETTER_RETENTION are pruned, younger ones kept. Bad values are
// configuration errors.
func TestRetention(t *testing.T) {
	ctx := context.Background()
	vars := map[string]string{
		"DATABASE_URL": freshDSN(t), "REDIS_ADDR": "none",
		"KAFKA_BROKERS":         strings.Join(testenv.KafkaCluster(t).ListenAddrs(), ","),
		"IDEMPOTENCY_RETENTION": "90m", "DEAD_LETTER_RETENTION": "48h",
	}
	env := app.MapEnv(vars)
	cfg := app.LoadConfig(env, "widget", "127.0.0.1:0")
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	if cfg.IdempotencyRetention != 90*time.Minute || cfg.DeadLetterRetention != 48*time.Hour {
		t.Fatalf("retentions %s, %s", cfg.IdempotencyRetention, cfg.DeadLetterRetention)
	}
	a, err := app.New(ctx, cfg.Service, app.WithConfig(cfg), app.WithLogOutput(io.Discard), app.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	claimKey(t, a, "k-1")
	var ttl time.Duration
	if err := a.Pool.QueryRow(ctx, "SELECT (extract(epoch FROM expires_at - now()) * 1e6)::bigint * 1000 FROM "+
		a.Store.TableName()+" WHERE key = 'k-1'").Scan(&ttl); err != nil {
		t.Fatal(err)
	}
	if ttl <= 80*time.Minute || ttl > 90*time.Minute {
		t.Errorf("record expires in %s, want 90m from its claim", ttl)
	}
	sw, err := idempotency.NewSweeper(a.Pool, idempotency.WithTable(a.Store.TableName()))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := sw.SweepOnce(ctx); err != nil || n != 0 {
		t.Fatalf("sweep before expiry: %d, %v", n, err)
	}
	if _, err := a.Pool.Exec(ctx, "UPDATE "+a.Store.TableName()+" SET expires_at = now() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	if n, err := sw.SweepOnce(ctx); err != nil || n != 1 {
		t.Fatalf("sweep after expiry: %d, %v", n, err)
	}

	for i, age := range []string{"47 hours", "49 hours", "1 minute", "400 days"} {
		if _, err := a.Pool.Exec(ctx, `INSERT INTO choreo_dead_letters (group_name, topic, partition, "offset", record_time,
			value_size, value_sha256, dlq_topic, reason, error, dlq_error, attempts, created_at)
			VALUES ('g', 't', 0, $1, now(), 0, '\x00', 't.dlq', 'malformed', 'e', 'too large', 1, now() - $2::interval)`, i, age); err != nil {
			t.Fatal(err)
		}
	}
	n, err := app.PruneDeadLetters(ctx, a.Pool, "choreo_dead_letters", cfg.DeadLetterRetention)
	if err != nil || n != 2 {
		t.Fatalf("pruned %d rows (%v), want the 2 older than 48h", n, err)
	}
	var left int
	if err := a.Pool.QueryRow(ctx, "SELECT count(*) FROM choreo_dead_letters WHERE created_at > now() - interval '48 hours'").Scan(&left); err != nil || left != 2 {
		t.Fatalf("%d young rows left (%v), want 2", left, err)
	}

	for _, bad := range []map[string]string{{"IDEMPOTENCY_RETENTION": "-1h"}, {"DEAD_LETTER_RETENTION": "soon"}} {
		env := app.MapEnv(bad)
		app.LoadConfig(env, "widget", "127.0.0.1:0")
		if err := env.Err(); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestRetentionSweepCadence runs an App whose retentions are seconds long: rows that
// expire while it runs are deleted within a few seconds, because both clean-ups run
// every twentieth of their retention when that is shorter than their usual pause (5
// minutes, an hour). The rows expire 4 s after they are written, so only a clean-up
// after that can delete them.
func TestRetentionSweepCadence(t *testing.T) {
	ctx := context.Background()
	env := app.MapEnv(map[string]string{
		"DATABASE_URL": freshDSN(t), "REDIS_ADDR": "none",
		"KAFKA_BROKERS":         strings.Join(testenv.KafkaCluster(t).ListenAddrs(), ","),
		"IDEMPOTENCY_RETENTION": "4s", "DEAD_LETTER_RETENTION": "4s",
	})
	cfg := app.LoadConfig(env, "widget", "127.0.0.1:0")
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	a, err := app.New(ctx, cfg.Service, app.WithConfig(cfg), app.WithLogOutput(io.Discard), app.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	<-a.Ready()

	claimKey(t, a, "k-1")
	if _, err := a.Pool.Exec(ctx, `INSERT INTO choreo_dead_letters (group_name, topic, partition, "offset", record_time,
		value_size, value_sha256, dlq_topic, reason, error, dlq_error, attempts, created_at)
		VALUES ('g', 't', 0, 1, now(), 0, '\x00', 't.dlq', 'malformed', 'e', 'too large', 1, now())`); err != nil {
		t.Fatal(err)
	}
	count := func() (records, archived int) {
		if err := a.Pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+a.Store.TableName()+
			"), (SELECT count(*) FROM choreo_dead_letters)").Scan(&records, &archived); err != nil {
			t.Fatal(err)
		}
		return records, archived
	}
	if r, d := count(); r != 1 || d != 1 {
		t.Fatalf("%d records and %d archived rows before they expire, want 1 and 1", r, d)
	}
	// Generous for a loaded machine: the cadence is one second here, and the old
	// cadence (5 minutes, an hour) could not pass.
	deadline := time.Now().Add(90 * time.Second)
	for {
		r, d := count()
		if r == 0 && d == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records and %d archived rows left 90 s after they were written with a 4 s retention", r, d)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// claimKey claims key through the App's idempotency store in a committed transaction.
func claimKey(t *testing.T, a *app.App, key string) {
	t.Helper()
	ctx := context.Background()
	tx, err := a.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Store.Claim(ctx, tx, "widget/test", key, idempotency.Hash([]byte("req"))); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
