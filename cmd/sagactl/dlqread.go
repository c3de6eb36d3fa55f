package main

// The dead-letter reader and replay: shared by the dlq commands (dlq.go) and the
// console's dead-letter page (console*.go), so both read and replay through one code path.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
)

// dlqHeaders are the headers consumer.DeadLetter adds; replay strips them.
var dlqHeaders = []string{
	consumer.HeaderDLQReason, consumer.HeaderDLQError, consumer.HeaderDLQAttempts,
	consumer.HeaderDLQTopic, consumer.HeaderDLQPartition, consumer.HeaderDLQOffset,
	consumer.HeaderDLQGroup, consumer.HeaderDLQTimestamp, consumer.HeaderDLQFailedAt,
	consumer.HeaderDLQTruncated, consumer.HeaderDLQOriginalSize, consumer.HeaderDLQSHA256,
	consumer.HeaderDLQArchiveTable, consumer.HeaderDLQArchiveID,
}

// dlqRecord is one dead-lettered record with its DeadLetter headers decoded.
type dlqRecord struct {
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Timestamp time.Time `json:"timestamp"`

	Reason          string    `json:"reason"`
	Error           string    `json:"error"`
	Attempts        int       `json:"attempts"`
	Group           string    `json:"group"`
	OriginTopic     string    `json:"origin_topic"`
	OriginPartition int32     `json:"origin_partition"`
	OriginOffset    int64     `json:"origin_offset"`
	FailedAt        time.Time `json:"failed_at"`

	EventID   string `json:"event_id,omitempty"`
	EventType string `json:"event_type,omitempty"`

	// A bounded copy (the dead-letter topic refused the whole record): the original is
	// in the archive table's row ArchiveID.
	Truncated    bool   `json:"truncated,omitempty"`
	OriginalSize int64  `json:"original_size,omitempty"`
	SHA256       string `json:"sha256,omitempty"`
	ArchiveTable string `json:"archive_table,omitempty"`
	ArchiveID    int64  `json:"archive_id,omitempty"`

	Key     string          `json:"key"`
	Value   json.RawMessage `json:"value,omitempty"`      // the payload when it is valid JSON
	Text    string          `json:"value_text,omitempty"` // otherwise, as text
	Headers []header        `json:"headers"`

	rec *kgo.Record
}

type header struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// pos is the record's position as the commands print and accept it.
func (r dlqRecord) pos() string { return fmt.Sprintf("%d:%d", r.Partition, r.Offset) }

func decodeDLQ(r *kgo.Record) dlqRecord {
	d := dlqRecord{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(),
		Key: string(r.Key), OriginPartition: -1, OriginOffset: -1, rec: r,
	}
	if json.Valid(r.Value) {
		d.Value = json.RawMessage(r.Value)
	} else {
		d.Text = string(r.Value)
	}
	for _, h := range r.Headers {
		v := string(h.Value)
		d.Headers = append(d.Headers, header{h.Key, v})
		switch h.Key {
		case consumer.HeaderDLQReason:
			d.Reason = v
		case consumer.HeaderDLQError:
			d.Error = v
		case consumer.HeaderDLQAttempts:
			d.Attempts, _ = strconv.Atoi(v)
		case consumer.HeaderDLQGroup:
			d.Group = v
		case consumer.HeaderDLQTopic:
			d.OriginTopic = v
		case consumer.HeaderDLQPartition:
			if p, err := strconv.ParseInt(v, 10, 32); err == nil {
				d.OriginPartition = int32(p)
			}
		case consumer.HeaderDLQOffset:
			if o, err := strconv.ParseInt(v, 10, 64); err == nil {
				d.OriginOffset = o
			}
		case consumer.HeaderDLQFailedAt:
			d.FailedAt, _ = time.Parse(time.RFC3339Nano, v)
		case consumer.HeaderDLQTruncated:
			d.Truncated = v == "true"
		case consumer.HeaderDLQOriginalSize:
			d.OriginalSize, _ = strconv.ParseInt(v, 10, 64)
		case consumer.HeaderDLQSHA256:
			d.SHA256 = v
		case consumer.HeaderDLQArchiveTable:
			d.ArchiveTable = v
		case consumer.HeaderDLQArchiveID:
			d.ArchiveID, _ = strconv.ParseInt(v, 10, 64)
		case event.HeaderID:
			d.EventID = v
		case event.HeaderType:
			d.EventType = v
		}
	}
	return d
}

// replayRecord is the record replay produces: the original topic, key, value and headers,
// without the dead-letter headers.
func (r dlqRecord) replayRecord(to string) *kgo.Record {
	if to == "" {
		to = r.OriginTopic
	}
	out := &kgo.Record{Topic: to, Key: r.rec.Key, Value: r.rec.Value}
	for _, h := range r.rec.Headers {
		if !slices.Contains(dlqHeaders, h.Key) {
			out.Headers = append(out.Headers, h)
		}
	}
	return out
}

// dlqTopic accepts a source topic or its dead-letter topic and returns the latter.
func dlqTopic(name string) string {
	if strings.HasSuffix(name, consumer.DeadLetterSuffix) {
		return name
	}
	return name + consumer.DeadLetterSuffix
}

// parsePos parses "partition:offset".
func parsePos(s string) (int32, int64, error) {
	ps, os, ok := strings.Cut(s, ":")
	p, perr := strconv.ParseInt(ps, 10, 32)
	o, oerr := strconv.ParseInt(os, 10, 64)
	if !ok || perr != nil || oerr != nil || p < 0 || o < 0 {
		return 0, 0, fmt.Errorf("%w: record position %q must be partition:offset, e.g. 0:12", errUsage, s)
	}
	return int32(p), o, nil
}

// kafka is a connected client plus its admin view.
type kafka struct {
	opts    []kgo.Opt // seed brokers, dial timeout and security of every client
	cl      *kgo.Client
	adm     *kadm.Client
	timeout time.Duration
}

// dialKafka connects and pings, so an absent broker is reported as unreachable at once
// rather than as a hanging request.
func dialKafka(ctx context.Context, c conn) (*kafka, error) {
	var brokers []string
	for b := range strings.SplitSeq(c.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if len(brokers) == 0 {
		return nil, fmt.Errorf("%w: -brokers is empty", errUsage)
	}
	opts, sec, err := c.clientOptions(brokers)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("sagactl: kafka client: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		cl.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sagactl: kafka: %w", ctx.Err())
		}
		return nil, fmt.Errorf("%w: kafka at %s (%s): %w (is the broker running? set -brokers or KAFKA_BROKERS; "+
			"a broker refusing the credentials closes the connection: check -kafka-sasl-* and -kafka-tls*)",
			errUnreachable, strings.Join(brokers, ","), sec, err)
	}
	return &kafka{opts: opts, cl: cl, adm: kadm.NewClient(cl), timeout: c.timeout}, nil
}

func (k *kafka) close() { k.cl.Close() }

// bounds returns each partition's [start, end) offsets of topic.
func (k *kafka) bounds(ctx context.Context, topic string) (map[int32][2]int64, error) {
	starts, err := k.adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return nil, fmt.Errorf("%w: topic %s", errNotFound, topic)
		}
		return nil, fmt.Errorf("sagactl: list offsets of %s: %w", topic, err)
	}
	ends, err := k.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("sagactl: list offsets of %s: %w", topic, err)
	}
	out := make(map[int32][2]int64)
	starts.Each(func(o kadm.ListedOffset) { out[o.Partition] = [2]int64{o.Offset, 0} })
	ends.Each(func(o kadm.ListedOffset) {
		b := out[o.Partition]
		b[1] = o.Offset
		out[o.Partition] = b
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: topic %s", errNotFound, topic)
	}
	return out, nil
}

// read returns the records of topic in [from, end) for each partition in from, stopping
// at the end offsets listed before reading.
func (k *kafka) read(ctx context.Context, topic string, from map[int32]int64, ends map[int32]int64) ([]dlqRecord, error) {
	offsets := make(map[int32]kgo.Offset)
	pending := make(map[int32]int64) // partition -> end offset still to reach
	for p, o := range from {
		if o < ends[p] {
			offsets[p] = kgo.NewOffset().At(o)
			pending[p] = ends[p]
		}
	}
	if len(offsets) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), k.opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))...)
	if err != nil {
		return nil, fmt.Errorf("sagactl: kafka client: %w", err)
	}
	defer cl.Close()
	var out []dlqRecord
	for len(pending) > 0 {
		pctx, cancel := context.WithTimeout(ctx, k.timeout)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sagactl: read %s: %w", topic, ctx.Err())
		}
		if fs.IsClientClosed() {
			return nil, fmt.Errorf("sagactl: read %s: client closed", topic)
		}
		progressed := false
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && ferr == nil {
				ferr = fmt.Errorf("sagactl: read %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := pending[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			progressed = true
			out = append(out, decodeDLQ(r))
			if r.Offset+1 >= end {
				delete(pending, r.Partition)
			}
		})
		if !progressed {
			return nil, fmt.Errorf("%w: kafka: no records from %s within %s (partitions %v still unread)",
				errUnreachable, topic, k.timeout, slices.Sorted(maps.Keys(pending)))
		}
	}
	slices.SortStableFunc(out, func(a, b dlqRecord) int {
		return cmp.Or(a.FailedAt.Compare(b.FailedAt), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	return out, nil
}

// readAll reads every record of topic.
func (k *kafka) readAll(ctx context.Context, topic string) ([]dlqRecord, error) {
	b, err := k.bounds(ctx, topic)
	if err != nil {
		return nil, err
	}
	from, ends := make(map[int32]int64), make(map[int32]int64)
	for p, se := range b {
		from[p], ends[p] = se[0], se[1]
	}
	return k.read(ctx, topic, from, ends)
}

// readOne reads the record at partition:offset of topic.
func (k *kafka) readOne(ctx context.Context, topic string, p int32, o int64) (dlqRecord, error) {
	b, err := k.bounds(ctx, topic)
	if err != nil {
		return dlqRecord{}, err
	}
	se, ok := b[p]
	if !ok {
		return dlqRecord{}, fmt.Errorf("%w: %s has no partition %d", errNotFound, topic, p)
	}
	if o < se[0] || o >= se[1] {
		return dlqRecord{}, fmt.Errorf("%w: %s partition %d has offsets %d..%d, not %d", errNotFound, topic, p, se[0], se[1]-1, o)
	}
	recs, err := k.read(ctx, topic, map[int32]int64{p: o}, map[int32]int64{p: o + 1})
	if err != nil {
		return dlqRecord{}, err
	}
	if len(recs) != 1 || recs[0].Offset != o {
		return dlqRecord{}, fmt.Errorf("%w: %s %d:%d", errNotFound, topic, p, o)
	}
	return recs[0], nil
}

// dlqFilter selects records by reason and group.
type dlqFilter struct{ reason, group string }

func (f dlqFilter) match(r dlqRecord) bool {
	return (f.reason == "" || r.Reason == f.reason) && (f.group == "" || r.Group == f.group)
}

// replayed is the result of replaying one record.
type replayed struct {
	From      string `json:"from"` // dlq topic partition:offset
	EventType string `json:"event_type,omitempty"`
	Key       string `json:"key"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"` // -1 on a dry run
	Offset    int64  `json:"offset"`    // -1 on a dry run
}

// replaySelection names the records of one dead-letter topic to replay: the records at
// Positions ("partition:offset"), or with All every record Filter matches.
type replaySelection struct {
	Topic     string // the dead-letter topic
	Positions []string
	All       bool
	Filter    dlqFilter
	To        string // produce here instead of each record's origin topic
	DryRun    bool   // select and check, produce nothing
}

// validate reports a selection that names nothing or mixes positions with -all.
func (s replaySelection) validate() error {
	switch {
	case s.All && len(s.Positions) > 0:
		return fmt.Errorf("%w: give record positions or -all, not both", errUsage)
	case !s.All && len(s.Positions) == 0:
		return fmt.Errorf("%w: name the records to replay (partition:offset ...) or pass -all", errUsage)
	case !s.All && (s.Filter.reason != "" || s.Filter.group != ""):
		return fmt.Errorf("%w: -reason and -group filter -all", errUsage)
	}
	return nil
}

// replay produces the records sel names back to their origin topics, as `sagactl dlq
// replay` and the console's replay button do. With All, truncated copies are skipped and
// reported to skipped; named ones are refused. Every check runs before the first record
// is produced, so an error before producing means nothing was replayed.
func (k *kafka) replay(ctx context.Context, sel replaySelection, skipped func(dlqRecord)) ([]replayed, error) {
	if err := sel.validate(); err != nil {
		return nil, err
	}
	type key struct {
		p int32
		o int64
	}
	want := make(map[key]bool)
	for _, s := range sel.Positions {
		p, o, err := parsePos(s)
		if err != nil {
			return nil, err
		}
		want[key{p, o}] = true
	}
	topic := sel.Topic
	recs, err := k.readAll(ctx, topic)
	if err != nil {
		return nil, err
	}
	var chosen []dlqRecord
	for _, r := range recs {
		if sel.All && sel.Filter.match(r) && r.Truncated {
			if skipped != nil {
				skipped(r)
			}
			continue
		}
		if sel.All && sel.Filter.match(r) || want[key{r.Partition, r.Offset}] {
			chosen = append(chosen, r)
			delete(want, key{r.Partition, r.Offset})
		}
	}
	if len(want) > 0 {
		var missing []string
		for k := range want {
			missing = append(missing, fmt.Sprintf("%d:%d", k.p, k.o))
		}
		slices.Sort(missing)
		return nil, fmt.Errorf("%w: no record at %s in %s (nothing replayed)", errNotFound, strings.Join(missing, ", "), topic)
	}
	for _, r := range chosen {
		if r.Truncated {
			return nil, fmt.Errorf("sagactl: %s %s is a truncated copy; its original is row %d of table %s: replay it from there (docs/operations.md) (nothing replayed)",
				topic, r.pos(), r.ArchiveID, orDash(r.ArchiveTable))
		}
		if r.OriginTopic == "" && sel.To == "" {
			return nil, fmt.Errorf("sagactl: %s %s has no %s header; pass -to TOPIC (nothing replayed)",
				topic, r.pos(), consumer.HeaderDLQTopic)
		}
	}
	out := make([]replayed, 0, len(chosen))
	for _, r := range chosen {
		rec := r.replayRecord(sel.To)
		res := replayed{From: r.pos(), EventType: r.EventType, Key: r.Key, Topic: rec.Topic, Partition: -1, Offset: -1}
		if !sel.DryRun {
			pctx, cancel := context.WithTimeout(ctx, k.timeout)
			err := k.cl.ProduceSync(pctx, rec).FirstErr()
			cancel()
			if err != nil {
				return out, fmt.Errorf("sagactl: replay %s %s to %s: %w (%d replayed before it)", topic, r.pos(), rec.Topic, err, len(out))
			}
			res.Partition, res.Offset = rec.Partition, rec.Offset
		}
		out = append(out, res)
	}
	return out, nil
}
