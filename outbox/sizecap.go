package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The round cap: when a topic's max.message.bytes is smaller than the client's
// ProducerBatchMaxBytes, franz-go may put more of a round's rows in one produce batch
// than the broker accepts. The broker then refuses that batch and writes the partition's
// later batches of the same round, and the refused rows, published again afterwards,
// come after rows with higher ids of the same keys. The relay prevents it by giving such
// a topic, per round, no more record bytes than one batch of it may hold: then no batch
// of the round can be too large, however franz-go splits it. See the package doc,
// "Failures".

const (
	// batchOverhead is the size of a v2 record batch without records, as the broker
	// measures it against max.message.bytes (Kafka's DefaultRecordBatch.sizeInBytes;
	// franz-go counts 4 bytes more, the records array's length in the request).
	batchOverhead = 61
	// clientBatchSlack is what franz-go counts in ProducerBatchMaxBytes beyond the
	// broker's measure (the array length above).
	clientBatchSlack = 4
	// traceparentSize bounds the traceparent header the producer span adds to a record
	// stored without one (key "traceparent", a 55-character W3C value, two length
	// varints). A stored traceparent is replaced by one of the same length.
	traceparentSize = 1 + 11 + 1 + 55

	limitTTL        = 5 * time.Minute // a learned limit is asked again after this
	limitRetry      = time.Minute     // after a failed lookup
	describeTimeout = 5 * time.Second // bounds one lookup (of all the round's due topics)
)

// topicLimit is what the relay knows of one topic's max.message.bytes.
type topicLimit struct {
	limit   int       // max.message.bytes; 0 while unknown
	budget  int       // record bytes one round may carry; 0 = not capped
	next    time.Time // when to ask the broker again
	failing bool      // the last lookup failed (logged once per streak)

	// per round, valid while round == the relay's round
	round  uint64
	used   int
	closed bool // a row was held back: every later row of the topic waits too
}

// limits is the relay's cache of topic limits. It is used by the leader's goroutine only.
type limits struct {
	admin     *kadm.Client
	clientMax func(string) int32 // the client's ProducerBatchMaxBytes per topic
	compress  bool               // the client may compress a batch
	byTopic   map[string]*topicLimit
	round     uint64
	topics    []string // scratch: the round's topics
	due       []string // scratch: those to look up
}

func newLimits(cl *kgo.Client) *limits {
	l := &limits{
		admin:     kadm.NewClient(cl),
		clientMax: func(string) int32 { return 1000012 },
		compress:  true,
		byTopic:   map[string]*topicLimit{},
	}
	if fn, ok := cl.OptValue(kgo.ProducerBatchMaxBytesFn).(func(string) int32); ok && fn != nil {
		l.clientMax = fn
	}
	// franz-go uses the first codec of the list the broker supports: with
	// NoCompression first it never compresses. (A custom compressor given with
	// kgo.WithCompressor and NoCompression first is taken at its word.)
	if cs, ok := cl.OptValue(kgo.ProducerBatchCompression).([]kgo.CompressionCodec); ok && len(cs) > 0 && cs[0] == kgo.NoCompression() {
		l.compress = false
	}
	return l
}

// lookUp refreshes the entries of topics (those due among the round's topics) with one
// DescribeConfigs request, bounded by describeTimeout: the round waits at most that
// long, once per topic every limitTTL. A topic whose lookup fails stays as it was
// (uncapped while its limit is unknown) until limitRetry
// has passed; the failure is logged once per streak.
func (r *Relay) lookUp(ctx context.Context, topics []string, now time.Time) {
	got, errs := r.describeLimits(ctx, topics)
	for _, topic := range topics {
		tl := r.limits.byTopic[topic]
		limit, ok := got[topic]
		if !ok {
			err := errs[topic]
			tl.next = now.Add(limitRetry)
			if ctx.Err() != nil || tl.failing {
				continue
			}
			tl.failing = true
			if tl.limit == 0 {
				r.log.Warn("outbox relay: cannot read the topic's max.message.bytes; its rounds are not capped until it can, so a broker refusal for size may reorder its keys",
					"topic", topic, "reason", "describe_configs_failed", "err", err, "retry_in", limitRetry)
			} else {
				r.log.Warn("outbox relay: cannot read the topic's max.message.bytes again; keeping the value read before",
					"topic", topic, "reason", "describe_configs_failed", "err", err, "retry_in", limitRetry, "max_message_bytes", tl.limit)
			}
			continue
		}
		tl.next = now.Add(limitTTL)
		clientMax := int(r.limits.clientMax(topic))
		budget := 0
		if clientMax-clientBatchSlack > limit {
			budget = limit
		}
		switch {
		case budget > 0 && (tl.failing || limit != tl.limit || budget != tl.budget):
			r.log.Info("outbox relay: the topic's max.message.bytes is below the client's ProducerBatchMaxBytes; capping its bytes per round to it",
				"topic", topic, "reason", "max_message_bytes_below_producer_batch_max_bytes", "max_message_bytes", limit, "producer_batch_max_bytes", clientMax)
		case budget == 0 && (tl.failing || tl.budget > 0):
			r.log.Info("outbox relay: the topic's max.message.bytes is known; its rounds are not capped",
				"topic", topic, "reason", "producer_batch_max_bytes_within_limit", "max_message_bytes", limit, "producer_batch_max_bytes", clientMax)
		}
		tl.limit, tl.budget, tl.failing = limit, budget, false
	}
}

// describeLimits asks the broker for the topics' max.message.bytes in one request. A
// topic missing from got has its error in errs.
func (r *Relay) describeLimits(ctx context.Context, topics []string) (got map[string]int, errs map[string]error) {
	got, errs = map[string]int{}, map[string]error{}
	dctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	rcs, err := r.limits.admin.DescribeTopicConfigs(dctx, topics...)
	for _, topic := range topics {
		if err != nil {
			errs[topic] = fmt.Errorf("describe configs: %w", err)
			continue
		}
		n, terr := limitOf(rcs, topic)
		if terr != nil {
			errs[topic] = fmt.Errorf("describe configs: %w", terr)
			continue
		}
		got[topic] = n
	}
	return got, errs
}

// limitOf reads topic's max.message.bytes from a DescribeConfigs answer.
func limitOf(rcs kadm.ResourceConfigs, topic string) (int, error) {
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return 0, err
	}
	for _, c := range rc.Configs {
		if c.Key == "max.message.bytes" && c.Value != nil {
			n, err := strconv.Atoi(*c.Value)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("max.message.bytes %q", *c.Value)
			}
			return n, nil
		}
	}
	return 0, errors.New("no max.message.bytes in the answer")
}

// refreshLimit makes the next round ask for topic's limit again (after a size refusal:
// the limit may have been lowered since it was read).
func (r *Relay) refreshLimit(topic string) {
	if tl := r.limits.byTopic[topic]; tl != nil {
		tl.next = time.Time{}
	}
}

// fit returns the rows of this round: rows in id order, except that a capped topic
// (see topicLimit.budget) gets only the longest prefix of its rows whose records fit in
// one batch of it; the rest of that topic waits in the table for the next round. A row
// whose record alone can never fit is dead-lettered here when the client does not
// compress (no produce attempt can succeed), and otherwise sent alone, as far as its
// topic is concerned, for the broker to decide. held reports whether rows were held back.
//
// In the default configuration (every topic's limit at least the client's batch size,
// or unknown) it returns rows itself, after a string comparison per row and a look at
// the round's few topics (BenchmarkFitUncapped: 8–14 ns per row, no allocation).
func (r *Relay) fit(ctx context.Context, conn *pgx.Conn, rows []row) (out []row, held bool, err error) {
	l := r.limits
	topics := l.topics[:0] // the round's topics
	for i := range rows {
		if i > 0 && rows[i].topic == rows[i-1].topic {
			continue
		}
		if !slices.Contains(topics, rows[i].topic) {
			topics = append(topics, rows[i].topic)
		}
	}
	l.topics = topics
	now := time.Now()
	due := l.due[:0]
	for _, topic := range topics {
		tl := l.byTopic[topic]
		if tl == nil {
			tl = &topicLimit{}
			l.byTopic[topic] = tl
		}
		if !now.Before(tl.next) {
			due = append(due, topic)
		}
	}
	l.due = due
	if len(due) > 0 && ctx.Err() == nil { // no new lookups while shutting down
		r.lookUp(ctx, due, now)
	}
	capped := false
	for _, topic := range topics {
		capped = capped || l.byTopic[topic].budget > 0
	}
	if !capped {
		return rows, false, nil
	}

	l.round++
	out = rows[:0:0]
	heldBy := map[string]int{}
	for _, x := range rows {
		tl := l.byTopic[x.topic]
		if tl.budget == 0 {
			out = append(out, x)
			continue
		}
		if tl.round != l.round {
			tl.round, tl.used, tl.closed = l.round, 0, false
		}
		if tl.closed {
			heldBy[x.topic]++
			continue
		}
		rec, err := r.build(x)
		if err != nil {
			out = append(out, x) // send dead-letters undecodable rows
			continue
		}
		upper, lower := recordSize(rec, r.cfg.batchSize)
		switch {
		case batchOverhead+upper <= tl.budget-tl.used:
			tl.used += upper
			out = append(out, x)
		case batchOverhead+lower > tl.budget && !l.compress:
			cause := fmt.Errorf("%w: the record takes %d bytes in a batch of its own, over topic %s's max.message.bytes %d, and the client does not compress (not produced)",
				kerr.MessageTooLarge, batchOverhead+lower, x.topic, tl.limit)
			if err := r.deadLetter(ctx, conn, x, cause); err != nil {
				return nil, false, err
			}
		case tl.used == 0:
			// Too large for a batch even alone, as far as the relay can tell
			// before compression: alone in its topic this round, the broker
			// can refuse no neighbour with it.
			tl.used, tl.closed = tl.budget, true
			out = append(out, x)
		default:
			tl.closed = true
			heldBy[x.topic]++
		}
	}
	for topic, n := range heldBy {
		r.metrics.held.Add(ctx, int64(n), r.metrics.topicAttrs(topic))
	}
	return out, len(heldBy) > 0, nil
}

// recordSize returns bounds of the bytes rec takes in a v2 record batch, as franz-go
// encodes it: upper with the widest offset and timestamp deltas it can have in a round
// of at most batchSize records (plus the traceparent header its producer span may add),
// lower with both deltas 0 (a batch of its own) and no header added.
func recordSize(rec *kgo.Record, batchSize int) (upper, lower int) {
	body := 1 + // attributes
		bytesSize(rec.Key) + bytesSize(rec.Value) +
		varintSize(int64(len(rec.Headers)))
	hasTraceparent := false
	for _, h := range rec.Headers {
		body += varintSize(int64(len(h.Key))) + len(h.Key) + bytesSize(h.Value)
		hasTraceparent = hasTraceparent || h.Key == "traceparent"
	}
	lowBody := body + 1 + 1 // timestamp and offset deltas of 0
	highBody := body + 10 + varintSize(int64(batchSize))
	if !hasTraceparent {
		highBody += traceparentSize
	}
	return varintSize(int64(highBody)) + highBody, varintSize(int64(lowBody)) + lowBody
}

// bytesSize is the encoded size of a nullable byte field of a record.
func bytesSize(b []byte) int {
	if b == nil {
		return 1 // length -1
	}
	return varintSize(int64(len(b))) + len(b)
}

// varintSize is the size of v as a zig-zag varint.
func varintSize(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
