package apptest

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
)

// DefaultTimeout bounds every wait of this package.
const DefaultTimeout = 2 * time.Minute

// Querier runs a query returning one row; *pgxpool.Pool and *pgx.Conn satisfy it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// WaitFor polls cond until it holds, failing t after DefaultTimeout.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, DefaultTimeout, "apptest: "+what, cond)
}

// WaitReady waits until GET baseURL+"/readyz" answers 200.
func WaitReady(t testing.TB, baseURL string) {
	t.Helper()
	WaitFor(t, baseURL+"/readyz", func() bool {
		resp, err := http.Get(baseURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// Kafka produces to and reads from a cluster on behalf of a test.
type Kafka struct {
	t       testing.TB
	brokers []string
	cl      *kgo.Client
	adm     *kadm.Client
}

// NewKafka returns a Kafka for brokers; its client is closed when the test ends.
func NewKafka(t testing.TB, brokers []string) *Kafka {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("apptest: kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return &Kafka{t: t, brokers: brokers, cl: cl, adm: kadm.NewClient(cl)}
}

// Client returns the underlying franz-go client.
func (k *Kafka) Client() *kgo.Client { return k.cl }

// Produce sends evs to topic in order and waits for the acks.
func (k *Kafka) Produce(topic string, evs ...event.Event) {
	k.t.Helper()
	k.produce(topic, 1, evs)
}

// ProduceTwice sends every event of evs twice in a row (same event id), as a producer
// retry or a relay crash between ack and delete would.
func (k *Kafka) ProduceTwice(topic string, evs ...event.Event) {
	k.t.Helper()
	k.produce(topic, 2, evs)
}

func (k *Kafka) produce(topic string, copies int, evs []event.Event) {
	k.t.Helper()
	var recs []*kgo.Record
	for _, ev := range evs {
		rec, err := event.ToRecord(topic, ev)
		if err != nil {
			k.t.Fatalf("apptest: encode %s: %v", ev.Type, err)
		}
		for i := 0; i < copies; i++ {
			c := *rec
			c.Headers = append([]kgo.RecordHeader(nil), rec.Headers...)
			recs = append(recs, &c)
		}
	}
	k.ProduceRecords(recs...)
}

// ProduceRecords sends raw records (e.g. poison ones) and waits for the acks.
func (k *Kafka) ProduceRecords(recs ...*kgo.Record) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	if err := k.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		k.t.Fatalf("apptest: produce: %v", err)
	}
}

// ReadAll returns every record of topic up to its end offsets at the time of the call,
// partition by partition in offset order.
func (k *Kafka) ReadAll(topic string) []*kgo.Record {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	ends, err := k.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		k.t.Fatalf("apptest: end offsets of %s: %v", topic, err)
	}
	end := map[int32]int64{}
	total := 0
	ends.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset; total += int(o.Offset) })
	if total == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		k.t.Fatalf("apptest: kafka client: %v", err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			k.t.Fatalf("apptest: read %s: got %d of %d records", topic, len(out), total)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < end[r.Partition] {
				out = append(out, r)
			}
		})
	}
	return out
}

// Events returns the events of topic (see ReadAll) grouped by subject, each group in
// the order it was published. A record that does not decode fails the test.
func (k *Kafka) Events(topic string) map[string][]event.Event {
	k.t.Helper()
	out := map[string][]event.Event{}
	for _, r := range k.ReadAll(topic) {
		ev, err := event.FromRecord(r)
		if err != nil {
			k.t.Fatalf("apptest: record on %s does not decode: %v", topic, err)
		}
		out[ev.Subject] = append(out[ev.Subject], ev)
	}
	return out
}

// CaughtUp reports whether group has committed the end offset of every non-empty
// partition of topics.
func (k *Kafka) CaughtUp(ctx context.Context, group string, topics ...string) (bool, error) {
	ends, err := k.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return false, err
	}
	if err := ends.Error(); err != nil {
		return false, err
	}
	committed, err := k.adm.FetchOffsets(ctx, group)
	if err != nil {
		return false, err
	}
	ok := true
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset <= 0 {
			return
		}
		if c, found := committed.Lookup(o.Topic, o.Partition); !found || c.At < o.Offset {
			ok = false
		}
	})
	return ok, nil
}

// WaitSettled waits until every group in groups has caught up on its topics (see
// CaughtUp) and then the outbox table of db (default outbox.DefaultTable) is empty. A
// handler's outgoing events are in the outbox before its offset is committed, so after
// that the service publishes nothing more unless fed new input.
func (k *Kafka) WaitSettled(db Querier, outboxTable string, groups map[string][]string) {
	k.t.Helper()
	if outboxTable == "" {
		outboxTable = outbox.DefaultTable
	}
	settled := func() bool {
		ctx := context.Background()
		for g, topics := range groups {
			if ok, err := k.CaughtUp(ctx, g, topics...); err != nil || !ok {
				return false
			}
		}
		var n int
		err := db.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s", outboxTable)).Scan(&n)
		return err == nil && n == 0
	}
	WaitFor(k.t, fmt.Sprintf("consumer groups %v caught up and %s drained", keys(groups), outboxTable), func() bool {
		return settled()
	})
}

func keys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// WantEvents checks what a service published, as Events returns it: got must hold
// events for exactly the subjects of want, and describe must render each subject's
// events as want says (e.g. "payment.authorized(),payment.refunded(cancelled)").
func WantEvents(t testing.TB, got map[string][]event.Event, describe func([]event.Event) string, want map[string]string) {
	t.Helper()
	for subject, w := range want {
		if g := describe(got[subject]); g != w {
			t.Errorf("%s: emitted %s, want %s", subject, g, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("events for %d subjects, want %d: %v", len(got), len(want), got)
	}
}
