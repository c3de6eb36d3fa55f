package app_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
)

// A consumer registered with Consume creates its dead-letter topic before it consumes,
// and a record whose dead-letter copy is too large is archived in the service's database
// with a bounded copy in the topic, and does not block the records behind it.
func TestConsumeDeadLetterPath(t *testing.T) {
	ctx := context.Background()
	a := newTestApp(t)
	// Only the source topic: Consume must create widgets.in.dlq itself.
	if err := app.EnsureTopics(ctx, a.Kafka, 2, "widgets.in"); err != nil {
		t.Fatal(err)
	}
	if err := app.MigrateSQL(ctx, a.Pool, "widget", `CREATE TABLE IF NOT EXISTS widgets (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	router := consumer.NewRouter().Handle("widget.ping", func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO widgets (id) VALUES ($1)`, ev.Subject)
		return err
	})
	if err := a.Consume(app.ConsumerSpec{Group: "widget", Topics: []string{"widgets.in"}, Router: router}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	<-a.Ready()

	// 5 MB of one letter: a few kilobytes on the wire, but too large for the payload limit
	// and for the dead-letter producer's batch limit.
	big, err := kgo.NewClient(kgo.SeedBrokers(a.brokers...), kgo.ProducerBatchMaxBytes(8<<20),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	huge, err := event.New("test", "widget.ping", "w-huge", map[string]string{"blob": strings.Repeat("a", 5<<20)})
	if err != nil {
		t.Fatal(err)
	}
	hugeRec, err := event.ToRecord("widgets.in", huge)
	if err != nil {
		t.Fatal(err)
	}
	hugeRec.Key = []byte("same") // the records behind it go to the same partition
	if err := big.ProduceSync(ctx, hugeRec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	k := apptest.NewKafka(t, a.brokers)
	next, err := event.New("test", "widget.ping", "w-next", map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	nextRec, err := event.ToRecord("widgets.in", next)
	if err != nil {
		t.Fatal(err)
	}
	nextRec.Key = []byte("same")
	k.ProduceRecords(nextRec)
	k.WaitSettled(a.Pool, "", map[string][]string{"widget": {"widgets.in"}})

	var n int
	if err := a.Pool.QueryRow(ctx, `SELECT count(*) FROM widgets WHERE id = 'w-next'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the record behind the oversize one: %d rows (%v)", n, err)
	}
	var id, size int64
	var reason string
	if err := a.Pool.QueryRow(ctx, `SELECT id, value_size, reason FROM `+consumer.DefaultDeadLetterTable+` WHERE group_name = 'widget'`).
		Scan(&id, &size, &reason); err != nil || size != int64(len(hugeRec.Value)) || reason != consumer.ReasonMalformed {
		t.Fatalf("archive row: id %d size %d reason %q (%v)", id, size, reason, err)
	}
	dlq := k.ReadAll(consumer.DeadLetterTopic("widgets.in"))
	if len(dlq) != 1 {
		t.Fatalf("%d records in the dead-letter topic, want 1", len(dlq))
	}
	h := map[string]string{}
	for _, hd := range dlq[0].Headers {
		h[hd.Key] = string(hd.Value)
	}
	if h[consumer.HeaderDLQTruncated] != "true" || h[consumer.HeaderDLQArchiveTable] != consumer.DefaultDeadLetterTable ||
		len(dlq[0].Value) != consumer.DefaultDeadLetterValueBytes {
		t.Errorf("dead-letter copy: %d bytes, headers %v", len(dlq[0].Value), h)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// A consumer whose dead-letter topic cannot be created fails the service at start,
// naming the topic.
func TestConsumeMissingDeadLetterTopic(t *testing.T) {
	ctx := context.Background()
	a := newTestApp(t)
	// Kafka refuses a topic whose name collides with an existing one up to '.' versus
	// '_', so widgets.in.dlq cannot be created.
	if err := app.EnsureTopics(ctx, a.Kafka, 2, "widgets.in", "widgets_in_dlq"); err != nil {
		t.Fatal(err)
	}
	err := a.Consume(app.ConsumerSpec{Group: "widget", Topics: []string{"widgets.in"},
		Handler: func(context.Context, pgx.Tx, event.Event) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(ctx)
	dlq := consumer.DeadLetterTopic("widgets.in")
	if !errors.Is(err, app.ErrComponent) || !errors.Is(err, consumer.ErrMissingTopic) || !strings.Contains(err.Error(), dlq) {
		t.Fatalf("Run = %v; want a component failure naming %s", err, dlq)
	}
	if !strings.Contains(a.logs.String(), "creating topics failed") {
		t.Errorf("no log line about the refused creation:\n%s", a.logs.String())
	}
}
