package outbox

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRecordSize checks recordSize against the wire encoding of a v2 record (kmsg, which
// franz-go's records follow): lower is exact for a record alone in its batch, upper
// bounds the record with the widest deltas of a round and a traceparent added.
func TestRecordSize(t *testing.T) {
	tp := kgo.RecordHeader{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}
	for _, tc := range []struct {
		name string
		rec  kgo.Record
	}{
		{"empty", kgo.Record{}},
		{"empty key and value", kgo.Record{Key: []byte{}, Value: []byte{}}},
		{"small", kgo.Record{Key: []byte("order-1"), Value: []byte(`{"a":1}`), Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte("x")}}}},
		{"traced", kgo.Record{Key: []byte("order-1"), Value: []byte(strings.Repeat("v", 300)), Headers: []kgo.RecordHeader{tp, {Key: "ce_type", Value: nil}}}},
		{"large", kgo.Record{Key: []byte(strings.Repeat("k", 200)), Value: []byte(strings.Repeat("v", 20000)), Headers: []kgo.RecordHeader{{Key: strings.Repeat("h", 130), Value: []byte(strings.Repeat("w", 129))}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upper, lower := recordSize(&tc.rec, 1000)
			if got := wireSize(&tc.rec, 0, 0, false); lower != got {
				t.Errorf("lower = %d, the record alone encodes to %d", lower, got)
			}
			if got := wireSize(&tc.rec, math.MaxInt64, 999, true); upper < got {
				t.Errorf("upper = %d, below the widest encoding %d", upper, got)
			}
			if upper-lower > 10+2+traceparentSize+1 {
				t.Errorf("upper %d is far above lower %d", upper, lower)
			}
		})
	}
}

// wireSize encodes rec as a v2 record with the given deltas (and a traceparent added if
// asked and absent) and returns its size.
func wireSize(rec *kgo.Record, tsDelta int64, offDelta int32, addTraceparent bool) int {
	kr := kmsg.Record{TimestampDelta64: tsDelta, OffsetDelta: offDelta, Key: rec.Key, Value: rec.Value}
	has := false
	for _, h := range rec.Headers {
		kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		has = has || h.Key == "traceparent"
	}
	if addTraceparent && !has {
		kr.Headers = append(kr.Headers, kmsg.Header{Key: "traceparent", Value: make([]byte, 55)})
	}
	kr.Length = int32(len(kr.AppendTo(nil)) - 1) // the body, after a 1-byte length of 0
	return len(kr.AppendTo(nil))
}

// BenchmarkFitUncapped is the cost fit adds to every round in the default configuration
// (no topic capped): a 1000-row round over three topics, in runs of ten rows per topic.
func BenchmarkFitUncapped(b *testing.B) {
	r := &Relay{limits: &limits{byTopic: map[string]*topicLimit{}}}
	rows := make([]row, 1000)
	for i := range rows {
		topic := fmt.Sprintf("service.events.%d", (i/10)%3)
		rows[i] = row{id: int64(i), topic: topic}
		r.limits.byTopic[topic] = &topicLimit{limit: 1048588, next: time.Now().Add(time.Hour)}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		out, held, err := r.fit(ctx, nil, rows)
		if err != nil || held || len(out) != len(rows) {
			b.Fatal(err, held, len(out))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
}
