package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
)

// dlqFixture is a source topic, its dead-letter topic holding records that the real
// consumer.DeadLetter middleware dead-lettered, and the original records.
type dlqFixture struct {
	brokers   []string
	source    string
	dlq       string
	retry     string        // the payment group's retry topic of source
	originals []*kgo.Record // as fetched from the source topic
	reasons   []string
}

func newDLQFixture(t *testing.T) dlqFixture {
	t.Helper()
	brokers := testenv.Kafka(t)
	source := testenv.Topic(t, brokers, 2)
	f := dlqFixture{brokers: brokers, source: source, dlq: source + ".dlq", retry: consumer.RetryTopic(source, "payment")}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx := context.Background()
	for _, name := range []string{f.dlq, f.retry} {
		if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, name); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}

	// Three events on the source topic, as the outbox relay would write them.
	for i := range 3 {
		ev, err := event.New("order", "order.created", fmt.Sprintf("order-%d", i), map[string]any{"order_id": fmt.Sprintf("order-%d", i), "amount": 100 * (i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := event.ToRecord(source, ev)
		if err != nil {
			t.Fatal(err)
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")})
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		f.originals = append(f.originals, rec) // ProduceSync filled in partition and offset
	}

	// The payment group's handler fails on each; DeadLetter (the library's own middleware)
	// writes them to the dead-letter topic with its headers.
	failures := []error{
		consumer.Permanent(errors.New("amount must be positive")),
		fmt.Errorf("decode: %w", event.ErrMalformed),
		consumer.Permanent(errors.New("customer missing")),
	}
	h := consumer.DeadLetter(cl)(func(ctx context.Context, m *consumer.Message) error {
		return failures[int(m.Record.Key[len(m.Record.Key)-1]-'0')]
	})
	for _, rec := range f.originals {
		if err := h(ctx, &consumer.Message{Record: rec, Group: "payment", Attempt: 1}); err != nil {
			t.Fatalf("DeadLetter: %v", err)
		}
	}
	for _, e := range failures {
		f.reasons = append(f.reasons, consumer.Reason(e))
	}
	return f
}

// sagactl runs the command and returns its exit code and output.
func sagactl(t *testing.T, brokers []string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	args = append(args, "-brokers", strings.Join(brokers, ","))
	code := run(context.Background(), args, stdio{out: &out, err: &errb, getenv: func(string) string { return "" }})
	return code, out.String(), errb.String()
}

func TestDLQListShowReplay(t *testing.T) {
	f := newDLQFixture(t)

	// list (all DLQ topics)
	code, out, errs := sagactl(t, f.brokers, "dlq", "list", "-json")
	if code != 0 {
		t.Fatalf("dlq list: exit %d: %s", code, errs)
	}
	var topics struct{ Topics []dlqTopicInfo }
	if err := json.Unmarshal([]byte(out), &topics); err != nil {
		t.Fatalf("dlq list -json: %v\n%s", err, out)
	}
	found := false
	for _, ti := range topics.Topics {
		if ti.Topic == f.dlq {
			found = true
			if ti.Records != 3 || ti.Copies != 3 || ti.Partitions != 2 || ti.Origin != f.source {
				t.Errorf("topic info %+v, want 3 dead letters in 2 partitions from %s", ti, f.source)
			}
		}
	}
	if !found {
		t.Fatalf("dlq list does not show %s: %s", f.dlq, out)
	}

	// list one topic, addressed by its source topic's name
	code, out, errs = sagactl(t, f.brokers, "dlq", "list", f.source, "-json")
	if code != 0 {
		t.Fatalf("dlq list topic: exit %d: %s", code, errs)
	}
	var listed struct {
		Topic   string
		Records []dlqRecord
	}
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatal(err)
	}
	if listed.Topic != f.dlq || len(listed.Records) != 3 {
		t.Fatalf("listed %s with %d records, want %s with 3", listed.Topic, len(listed.Records), f.dlq)
	}
	byKey := make(map[string]dlqRecord)
	for _, r := range listed.Records {
		byKey[r.Key] = r
	}
	for i, orig := range f.originals {
		r, ok := byKey[string(orig.Key)]
		if !ok {
			t.Fatalf("no DLQ record for key %s", orig.Key)
		}
		if r.Reason != f.reasons[i] || r.Group != "payment" || r.Attempts != 1 ||
			r.OriginTopic != f.source || r.OriginPartition != orig.Partition || r.OriginOffset != orig.Offset ||
			r.EventType != "order.created" || r.FailedAt.IsZero() || compact(t, r.Value) != compact(t, orig.Value) {
			t.Errorf("record %s = %+v\nwant reason %s from %s/%d@%d", orig.Key, r, f.reasons[i], f.source, orig.Partition, orig.Offset)
		}
	}
	if byKey["order-0"].Error != "amount must be positive" {
		t.Errorf("error text %q", byKey["order-0"].Error)
	}

	// filters
	code, out, _ = sagactl(t, f.brokers, "dlq", "list", f.dlq, "-reason", consumer.ReasonMalformed, "-json")
	if code != 0 || strings.Count(out, `"reason": "malformed"`) != 1 || strings.Contains(out, `"reason": "permanent"`) {
		t.Errorf("-reason malformed: exit %d\n%s", code, out)
	}
	code, out, _ = sagactl(t, f.brokers, "dlq", "list", f.dlq, "-group", "inventory")
	if code != 0 || !strings.Contains(out, "no dead-lettered records") {
		t.Errorf("-group inventory: exit %d\n%s", code, out)
	}

	// human table
	code, out, _ = sagactl(t, f.brokers, "dlq", "list", f.dlq)
	if code != 0 {
		t.Fatalf("dlq list table: exit %d", code)
	}
	for _, want := range []string{"POS", "REASON", "payment", "malformed", "permanent", "order.created", "amount must be positive",
		fmt.Sprintf("%s/%d@%d", f.source, f.originals[0].Partition, f.originals[0].Offset), "3 dead letter(s) in " + f.dlq} {
		if !strings.Contains(out, want) {
			t.Errorf("table misses %q:\n%s", want, out)
		}
	}

	// show
	target := byKey["order-1"]
	code, out, errs = sagactl(t, f.brokers, "dlq", "show", f.dlq, target.pos())
	if code != 0 {
		t.Fatalf("dlq show: exit %d: %s", code, errs)
	}
	for _, want := range []string{"reason     malformed (after 1 attempt(s), group payment)", "key        order-1",
		consumer.HeaderDLQError + ": decode: ", "ce_type: order.created", `"order_id": "order-1"`,
		"replay it with: sagactl dlq replay " + f.dlq + " " + target.pos()} {
		if !strings.Contains(out, want) {
			t.Errorf("show misses %q:\n%s", want, out)
		}
	}
	code, _, errs = sagactl(t, f.brokers, "dlq", "show", f.dlq, "0:999")
	if code != exitFailure || !strings.Contains(errs, "not found") {
		t.Errorf("show of a missing offset: exit %d: %s", code, errs)
	}
	code, _, errs = sagactl(t, f.brokers, "dlq", "show", "no-such-topic", "0:0")
	if code != exitFailure || !strings.Contains(errs, "not found") {
		t.Errorf("show of a missing topic: exit %d: %s", code, errs)
	}

	// replay one record, dry run first: nothing produced
	code, out, errs = sagactl(t, f.brokers, "dlq", "replay", f.dlq, target.pos(), "-dry-run")
	if code != 0 || !strings.Contains(out, "would replay 1 record(s)") {
		t.Fatalf("dry run: exit %d: %s%s", code, out, errs)
	}
	code, out, errs = sagactl(t, f.brokers, "dlq", "replay", f.dlq, target.pos(), "-json")
	if code != 0 {
		t.Fatalf("replay: exit %d: %s", code, errs)
	}
	var rep struct {
		DryRun   bool `json:"dry_run"`
		Replayed []replayed
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	// To the payment group's retry topic: only the group that failed reads it.
	if rep.DryRun || len(rep.Replayed) != 1 || rep.Replayed[0].Topic != f.retry || rep.Replayed[0].Group != "payment" || rep.Replayed[0].Offset < 0 {
		t.Fatalf("replay result %+v", rep)
	}
	got := fetchAt(t, f.brokers, f.retry, rep.Replayed[0].Partition, rep.Replayed[0].Offset)
	orig := f.originals[1]
	if string(got.Key) != string(orig.Key) || string(got.Value) != string(orig.Value) {
		t.Errorf("replayed key/value %s/%s, want %s/%s", got.Key, got.Value, orig.Key, orig.Value)
	}
	if fmt.Sprint(headerList(got)) != fmt.Sprint(headerList(orig)) {
		t.Errorf("replayed headers\n%v\nwant the original\n%v", headerList(got), headerList(orig))
	}
	// Keyed like the original, so it lands on the same partition: per-order order holds.
	if got.Partition != orig.Partition {
		t.Errorf("replayed to partition %d, original was on %d", got.Partition, orig.Partition)
	}
	// It is the same event (same ce_id), which is what makes replay idempotent downstream.
	ev, err := event.FromRecord(got)
	if err != nil {
		t.Fatalf("replayed record does not decode: %v", err)
	}
	origEv, _ := event.FromRecord(orig)
	if ev.ID != origEv.ID {
		t.Errorf("replayed event id %s, want %s", ev.ID, origEv.ID)
	}

	// replay -all with a filter: the two permanent ones
	code, out, errs = sagactl(t, f.brokers, "dlq", "replay", f.dlq, "-all", "-reason", consumer.ReasonPermanent)
	if code != 0 || !strings.Contains(out, "replayed 2 record(s)") || !strings.Contains(out, "order-0") || !strings.Contains(out, "order-2") {
		t.Fatalf("replay -all -reason permanent: exit %d\n%s%s", code, out, errs)
	}
	// A missing position aborts before anything is produced.
	code, _, errs = sagactl(t, f.brokers, "dlq", "replay", f.dlq, target.pos(), "1:999")
	if code != exitFailure || !strings.Contains(errs, "1:999") || !strings.Contains(errs, "nothing replayed") {
		t.Errorf("replay of a missing position: exit %d: %s", code, errs)
	}
	// -source republishes to the source topic, which every group reads.
	code, out, errs = sagactl(t, f.brokers, "dlq", "replay", f.dlq, "-all", "-group", "payment", "-source", "-json")
	if code != 0 {
		t.Fatalf("replay -source: exit %d: %s", code, errs)
	}
	rep.Replayed = nil
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Replayed) != 3 {
		t.Fatalf("replay -all -group payment -source: %v %+v", err, rep)
	}
	for _, r := range rep.Replayed {
		if r.Topic != f.source {
			t.Errorf("replayed to %s, want %s", r.Topic, f.source)
		}
	}
	if n := endOffsetSum(t, f.brokers, f.retry); n != 1+2 {
		t.Errorf("retry topic holds %d records, want 3 (1 + 2 replays)", n)
	}
	if n := endOffsetSum(t, f.brokers, f.source); n != 3+3 {
		t.Errorf("source topic holds %d records, want 6 (3 originals + 3 replays with -source)", n)
	}
	// The destination is never the operator's choice.
	if code, _, _ := sagactl(t, f.brokers, "dlq", "replay", f.dlq, "-all", "-to", f.source); code != exitUsage {
		t.Errorf("replay -to: exit %d, want %d (no such flag)", code, exitUsage)
	}
}

func fetchAt(t *testing.T, brokers []string, topic string, p int32, o int64) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(o)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no record at %s %d:%d", topic, p, o)
		}
		for _, r := range fs.Records() {
			if r.Offset == o {
				return r
			}
		}
	}
}

func compact(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	return buf.String()
}

func headerList(r *kgo.Record) []string {
	var out []string
	for _, h := range r.Headers {
		out = append(out, h.Key+"="+string(h.Value))
	}
	return out
}

func endOffsetSum(t *testing.T, brokers []string, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

func TestDLQEmptyTopic(t *testing.T) {
	brokers := testenv.Kafka(t)
	source := testenv.Topic(t, brokers, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, nil, source+".dlq"); err != nil {
		t.Fatal(err)
	}
	code, out, errs := sagactl(t, brokers, "dlq", "list", source)
	if code != 0 || !strings.Contains(out, "no dead-lettered records") {
		t.Errorf("empty DLQ: exit %d: %s%s", code, out, errs)
	}
	code, out, _ = sagactl(t, brokers, "dlq", "replay", source, "-all")
	if code != 0 || !strings.Contains(out, "nothing to replay") {
		t.Errorf("replay -all of an empty DLQ: exit %d: %s", code, out)
	}
}
