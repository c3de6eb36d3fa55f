package consumer

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/internal/testenv"
)

// TestDeadLetterOnceAfterCrash runs the runtime with DeadLetter over three poison
// records and simulates a kill -9 of the first owner between the dead-letter copy's
// acknowledgement and the offset commit: its chain never returns for the first record
// after DeadLetter wrote the copy, so no offset is committed. Before the second owner
// starts, a record naming the second poison record but carrying another value is put
// into the dead-letter topic (a forgery, or a copy of something else). The second owner
// settles the first record without a second copy, and writes the copies of the other
// two: the dead-letter topic ends with one genuine copy per poison record.
func TestDeadLetterOnceAfterCrash(t *testing.T) {
	brokers := testenv.Kafka(t)
	src := testenv.Topic(t, brokers, 1)
	dlq := src + DeadLetterSuffix
	createTopic(t, brokers, dlq, nil)
	group := testenv.Name(t, "g")
	cl := newProducer(t, brokers)
	var poison []*kgo.Record
	for i := range 3 {
		poison = append(poison, &kgo.Record{Topic: src, Key: []byte("k" + strconv.Itoa(i)), Value: []byte("bad " + strconv.Itoa(i)),
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte{byte(i)}}}})
	}
	produce(t, cl, poison...)

	fail := func(context.Context, *Message) error { return Permanent(errors.New("no such customer")) }
	var crashed atomic.Bool
	first := func(ctx context.Context, m *Message) error {
		err := DeadLetter(cl)(fail)(ctx, m)
		if err == nil && m.Record.Offset == 0 && crashed.CompareAndSwap(false, true) {
			<-ctx.Done() // killed here: the record is never marked, its offset never committed
			return ctx.Err()
		}
		return err
	}
	c1, err := New(brokers, group, []string{src}, first, fastGroup(), WithShutdownTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r1 := start(t, c1)
	waitFor(t, "the first copy", func() bool { return endOffsets(t, brokers, dlq)[0] == 1 })
	if err := r1.stop(t); err != nil {
		t.Fatal(err)
	}
	if o, ok := committed(t, brokers, group, src)[0]; ok && o > 0 {
		t.Fatalf("committed offset %d after the crash; the test needs the first record uncommitted", o)
	}

	forged := &kgo.Record{Topic: dlq, Key: poison[1].Key, Value: []byte("another value"), Headers: []kgo.RecordHeader{
		{Key: HeaderDLQTopic, Value: []byte(src)}, {Key: HeaderDLQPartition, Value: []byte("0")},
		{Key: HeaderDLQOffset, Value: []byte("1")}, {Key: HeaderDLQGroup, Value: []byte(group)},
	}}
	produce(t, cl, forged)

	c2, err := New(brokers, group, []string{src}, DeadLetter(cl)(fail), fastGroup())
	if err != nil {
		t.Fatal(err)
	}
	start(t, c2)
	waitFor(t, "every poison record settled", func() bool { return committed(t, brokers, group, src)[0] == 3 })

	copies := map[int64]int{} // source offset -> genuine copies
	for _, r := range readTopic(t, brokers, dlq, int(endOffsets(t, brokers, dlq)[0])) {
		m := &Message{Record: r}
		o, _ := strconv.ParseInt(m.Header(HeaderDLQOffset), 10, 64)
		if string(r.Value) == string(poison[o].Value) && m.Header(HeaderDLQReason) == ReasonPermanent {
			copies[o]++
		}
	}
	for o := range int64(3) {
		if copies[o] != 1 {
			t.Errorf("source offset %d has %d copies in %s, want 1 (copies %v)", o, copies[o], dlq, copies)
		}
	}
	if n := endOffsets(t, brokers, dlq)[0]; n != 4 {
		t.Errorf("%s holds %d records, want 4: 3 copies and the forged one", dlq, n)
	}
}

// TestDeadLetterCheckSkipsNewRecords: a record stamped after its partition's assignment
// (beyond the clock allowance) is dead-lettered without reading the topic, and so is
// any record outside the runtime or with a Producer that is not a *kgo.Client.
func TestDeadLetterCheckSkipsNewRecords(t *testing.T) {
	ctx := withPartitionRun(context.Background())
	c := deadLetterConfig{lookback: deadLetterLookback}
	fresh := &Message{Record: &kgo.Record{Topic: "t", Timestamp: time.Now().Add(2 * deadLetterClockSkew)}, Group: "g"}
	// An unreachable broker: a read would fail or block; the answer must come at once.
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if dup, err := c.alreadyCopied(ctx, cl, fresh, "t.dlq"); dup || err != nil {
		t.Errorf("a record newer than the assignment: %v %v", dup, err)
	}
	if run := ctx.Value(partitionRunKey{}).(*partitionRun); run.scanned {
		t.Error("the topic was read for a record newer than the assignment")
	}
	old := &Message{Record: &kgo.Record{Topic: "t", Timestamp: time.Now().Add(-time.Hour)}, Group: "g"}
	var p Producer = producerFunc(func(context.Context, ...*kgo.Record) kgo.ProduceResults { return nil })
	if dup, err := c.alreadyCopied(ctx, p, old, "t.dlq"); dup || err != nil {
		t.Errorf("a producer that cannot read: %v %v", dup, err)
	}
	if dup, err := c.alreadyCopied(context.Background(), cl, old, "t.dlq"); dup || err != nil {
		t.Errorf("outside the runtime: %v %v", dup, err)
	}
}

type producerFunc func(context.Context, ...*kgo.Record) kgo.ProduceResults

func (f producerFunc) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	return f(ctx, rs...)
}
