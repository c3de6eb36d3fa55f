package consumer

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/choreo-saga/choreo/internal/testenv"
)

// countingHandler counts log records whose message contains a substring.
type countingHandler struct {
	substr string
	n      *atomic.Int32
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.substr) {
		h.n.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// When the broker fences the member out of the group (a heartbeat fails with
// ILLEGAL_GENERATION), its partitions are lost: the workers stop without committing, the
// member rejoins, and the work cut short is redone once in effect, in order.
func TestConsumerLostPartitions(t *testing.T) {
	cluster := testenv.KafkaCluster(t)
	brokers := cluster.ListenAddrs()
	topic := testenv.Topic(t, brokers, 3)
	pool := newDB(t)
	const perKey = 40
	ks := keys(6)
	total := len(ks) * perKey
	produce(t, newProducer(t, brokers), seqEvents(t, topic, ks, perKey)...)

	inner := wrap(idempotent(t, IdempotentConfig{DB: pool}, applySeq), decodeRecord())
	h := func(ctx context.Context, m *Message) error {
		time.Sleep(2 * time.Millisecond)
		return inner(ctx, m)
	}
	var lost atomic.Int32
	logger := slog.New(countingHandler{substr: "partitions lost", n: &lost})
	c, err := New(brokers, testenv.Name(t, "g"), []string{topic}, h, fastGroup(), WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	waitFor(t, "some effects", func() bool { return count(t, pool, `SELECT count(*) FROM effects`) >= total/4 })

	var injected atomic.Bool
	cluster.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.IllegalGeneration.Code
		injected.Store(true)
		return resp, nil, true
	})
	waitFor(t, "the fault to be injected", injected.Load)
	waitFor(t, "partitions lost", func() bool { return lost.Load() > 0 })
	waitFor(t, "all effects", func() bool { return count(t, pool, `SELECT count(*) FROM effects`) >= total })

	if n := count(t, pool, `SELECT count(*) FROM effects`); n != total {
		t.Errorf("%d effects, want %d", n, total)
	}
	if n := count(t, pool, `SELECT count(DISTINCT event_id) FROM effects`); n != total {
		t.Errorf("%d distinct events, want %d", n, total)
	}
	if n := count(t, pool, `SELECT count(*) FROM entities WHERE seq = $1`, perKey); n != len(ks) {
		t.Errorf("%d of %d keys complete and in order", n, len(ks))
	}
}
