package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/migrate"
)

// A record whose dead-letter copy the topic refused for its size is in the DLQ as a
// bounded copy: list marks it, show says where the original is, replay refuses it.
func TestDLQTruncatedCopy(t *testing.T) {
	brokers := testenv.Kafka(t)
	source := testenv.Topic(t, brokers, 1)
	dlq := consumer.DeadLetterTopic(source)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": kadm.StringPtr("16384")}, dlq)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	pool := testenv.Postgres(t)
	archive, err := consumer.NewDeadLetterArchive(pool, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	pad := make([]byte, 64<<10) // random, so that compression cannot bring the copy under the topic's limit
	rand.Read(pad)
	ev, err := event.New("test", "payment.requested", "order-1", map[string][]byte{"pad": pad})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := event.ToRecord(source, ev)
	if err != nil {
		t.Fatal(err)
	}
	value := rec.Value
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	h, err := consumer.Standard(consumer.StandardConfig{
		DB: pool, DeadLetter: cl, DeadLetterArchive: archive, DeadLetterValueBytes: 1024,
		Handler: func(context.Context, pgx.Tx, event.Event) error {
			return consumer.Permanent(errors.New("too big to handle"))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h(ctx, &consumer.Message{Record: rec, Group: "payment", Attempt: 1}); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}

	code, out, errs := sagactl(t, brokers, "dlq", "list", source)
	if code != 0 || !strings.Contains(out, "permanent (truncated)") {
		t.Errorf("dlq list: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = sagactl(t, brokers, "dlq", "show", dlq, "0:0", "-json")
	var r dlqRecord
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil {
		t.Fatalf("dlq show -json: exit %d %v\n%s%s", code, err, out, errs)
	}
	if !r.Truncated || r.OriginalSize != int64(len(value)) || r.ArchiveTable != consumer.DefaultDeadLetterTable ||
		r.ArchiveID != 1 || len(r.SHA256) != 64 {
		t.Errorf("dlq show: %+v", r)
	}
	code, out, errs = sagactl(t, brokers, "dlq", "show", dlq, "0:0")
	if code != 0 || !strings.Contains(out, "row 1 of table choreo_dead_letters") {
		t.Errorf("dlq show: exit %d\n%s%s", code, out, errs)
	}
	code, _, errs = sagactl(t, brokers, "dlq", "replay", dlq, "0:0")
	if code == 0 || !strings.Contains(errs, "truncated copy") {
		t.Errorf("dlq replay of a truncated copy: exit %d: %s", code, errs)
	}
	code, out, errs = sagactl(t, brokers, "dlq", "replay", dlq, "-all")
	if code != 0 || !strings.Contains(out, "nothing to replay") || !strings.Contains(errs, "skipping") {
		t.Errorf("dlq replay -all: exit %d\n%s%s", code, out, errs)
	}
	if n := endOffsetSum(t, brokers, source); n != 1 {
		t.Errorf("source topic holds %d records after the refused replays, want 1", n)
	}
}
