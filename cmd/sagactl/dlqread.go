package main

// The dead-letter reader and replay: shared by the dlq commands (dlq.go) and the
// console's dead-letter page (console*.go), so both read and replay through one code path.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
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

	// Copies is how many records of the topic are this dead letter (the same source
	// record, group, key, value and headers): more than 1 when a consumer was killed after the dead-letter
	// copy was acknowledged and before the source offset was committed, and wrote it
	// again after the restart. Duplicates are the positions of the other copies. The
	// list, the counts and replay show and replay such a dead letter once.
	Copies     int      `json:"copies,omitempty"`
	Duplicates []string `json:"duplicates,omitempty"`

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

// dlqTopic accepts a source topic or its dead-letter topic and returns the latter.
func dlqTopic(name string) string {
	if strings.HasSuffix(name, consumer.DeadLetterSuffix) {
		return name
	}
	return consumer.DeadLetterTopic(name)
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
	// What a record may cost sagactl, as it may cost a service with the default
	// MAX_RECORD_BYTES: a compression bomb in a topic is refused, not decompressed whole.
	limits, err := consumer.FetchLimits(consumer.DefaultMaxRecordBytes)
	if err != nil {
		return nil, err
	}
	opts = append(opts, limits...)
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

// offsetBounds are each partition's [start, end) offsets of a topic.
type offsetBounds map[int32][2]int64

// wasWritten reports whether offset of partition was ever written: the partition exists
// and offset is below its end offset (below its start, retention deleted it).
func (b offsetBounds) wasWritten(partition int32, offset int64) bool {
	pb, ok := b[partition]
	return ok && offset < pb[1]
}

// bounds returns each partition's [start, end) offsets of topic.
func (k *kafka) bounds(ctx context.Context, topic string) (offsetBounds, error) {
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

// dlqIdentity names the dead letter a record is: the source record (topic, partition,
// offset), the group that gave up on it, and a digest of what it carries (key, value
// and the headers but the choreo_dlq_* ones). Copies with one identity are one dead
// letter; a record that names the same origin with other content is listed on its own.
type dlqIdentity struct {
	topic     string
	partition int32
	offset    int64
	group     string
	content   [sha256.Size]byte
}

// identity returns r's identity, or false when r lacks the headers that make one (it
// is then a dead letter of its own).
func (r dlqRecord) identity() (dlqIdentity, bool) {
	if r.OriginTopic == "" || r.OriginPartition < 0 || r.OriginOffset < 0 || r.rec == nil {
		return dlqIdentity{}, false
	}
	h := sha256.New()
	field := func(b []byte) {
		h.Write(binary.AppendUvarint(nil, uint64(len(b))))
		h.Write(b)
	}
	field(r.rec.Key)
	field(r.rec.Value)
	for _, hd := range r.rec.Headers {
		if !slices.Contains(dlqHeaders, hd.Key) {
			field([]byte(hd.Key))
			field(hd.Value)
		}
	}
	id := dlqIdentity{topic: r.OriginTopic, partition: r.OriginPartition, offset: r.OriginOffset, group: r.Group}
	h.Sum(id.content[:0])
	return id, true
}

// dedupe returns one record per dead letter of recs, the first copy in recs' order (read
// sorts by failure time, so the first written), with Copies and Duplicates set.
func dedupe(recs []dlqRecord) []dlqRecord {
	first := make(map[dlqIdentity]int) // identity -> index in out
	out := make([]dlqRecord, 0, len(recs))
	for _, r := range recs {
		id, ok := r.identity()
		if i, seen := first[id]; ok && seen {
			out[i].Copies++
			out[i].Duplicates = append(out[i].Duplicates, r.pos())
			continue
		}
		if ok {
			first[id] = len(out)
		}
		r.Copies, r.Duplicates = 1, nil
		out = append(out, r)
	}
	return out
}

// withCopies returns the record of recs at position p:o, with Copies and Duplicates
// naming every other copy of the same dead letter in recs.
func withCopies(recs []dlqRecord, p int32, o int64) (dlqRecord, bool) {
	i := slices.IndexFunc(recs, func(r dlqRecord) bool { return r.Partition == p && r.Offset == o })
	if i < 0 {
		return dlqRecord{}, false
	}
	r := recs[i]
	r.Copies, r.Duplicates = 1, nil
	if id, ok := r.identity(); ok {
		for j, c := range recs {
			if cid, ok := c.identity(); ok && j != i && cid == id {
				r.Copies++
				r.Duplicates = append(r.Duplicates, c.pos())
			}
		}
	}
	return r, true
}

// readDLQ reads every record of the dead-letter topic and returns one per dead letter
// (dedupe), as the list, the console and replay -all count and replay them.
func (k *kafka) readDLQ(ctx context.Context, topic string) ([]dlqRecord, error) {
	recs, err := k.readAll(ctx, topic)
	if err != nil {
		return nil, err
	}
	return dedupe(recs), nil
}

// checkReason returns an error matching errUsage when reason is neither one of the
// library's reasons (consumer.Reasons) nor the reason of a record of recs.
func checkReason(reason string, recs []dlqRecord) error {
	known := consumer.Reasons()
	for _, r := range recs {
		if r.Reason != "" && !slices.Contains(known, r.Reason) {
			known = append(known, r.Reason)
		}
	}
	if reason == "" || slices.Contains(known, reason) {
		return nil
	}
	return fmt.Errorf("%w: unknown reason %q; valid reasons: %s", errUsage, reason, strings.Join(known, ", "))
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
	Group     string `json:"group"`     // the group that dead-lettered it
	Topic     string `json:"topic"`     // where it is (or would be) produced
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
	// Source republishes to the source topic, which every group consuming it reads,
	// instead of the retry topic of the group that dead-lettered each record.
	Source bool
	DryRun bool // select and check, produce nothing
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

// errRefused is returned when replay refuses records it cannot prove are dead letters
// of their source topic: for named records nothing is produced then; with -all the
// others are, and the refused ones are reported (replayPlan.refused).
var errRefused = errors.New("sagactl: replay refused")

// refusal is a record a replay -all left out because it failed a check.
type refusal struct {
	From string `json:"from"`   // dlq partition:offset
	Why  string `json:"reason"` // the check it failed
}

func (r refusal) String() string { return r.From + ": " + r.Why }

// replayPlan is a checked replay of one dead-letter topic: the records to produce,
// nothing produced yet, and with All the records refused.
type replayPlan struct {
	topic   string
	items   []replayed
	recs    []*kgo.Record
	refused []refusal
}

// refusedError returns an error matching errRefused naming p's refused records, or nil.
func (p *replayPlan) refusedError() error {
	if len(p.refused) == 0 {
		return nil
	}
	why := make([]string, len(p.refused))
	for i, r := range p.refused {
		why[i] = r.String()
	}
	return fmt.Errorf("%w: %d record(s) of %s are not replayed (forged or altered copies, or not dead letters of this topic): %s",
		errRefused, len(p.refused), p.topic, strings.Join(why, "; "))
}

// plan selects the records sel names and checks each, producing nothing. With All,
// every dead letter the filter matches once (copies of one are replayed once); truncated
// copies, and records whose origin is no longer in its topic (retention), are skipped
// and reported to skipped; named ones are refused. A record is replayed only if it
// proves to be what consumer.DeadLetter wrote for a record of this topic's source:
//
//   - it names its origin (choreo_dlq_topic, _partition, _offset) and group
//     (choreo_dlq_group), and the origin is the dead-letter topic's source topic or that
//     group's retry topic (consumer.RetryTopic);
//   - the origin record is still there and its key, value and headers are the dead
//     letter's (without the choreo_dlq_* headers the library adds after them).
//
// What is produced is the origin record as read back from its topic. It goes to the
// retry topic of the group that dead-lettered it (only that group reads it), or with
// Source to the source topic; the destination must exist. A named record that fails any
// check refuses the whole plan, with every refusal named in one error matching
// errRefused. With All, a record that fails a check is left out and listed in the
// plan's refused; the others are planned, so one forged copy does not hold back the
// genuine dead letters. A missing destination refuses the whole plan either way.
func (k *kafka) plan(ctx context.Context, sel replaySelection, skipped func(r dlqRecord, why string)) (*replayPlan, error) {
	if err := sel.validate(); err != nil {
		return nil, err
	}
	type pos struct {
		p int32
		o int64
	}
	want := make(map[pos]bool)
	for _, s := range sel.Positions {
		p, o, err := parsePos(s)
		if err != nil {
			return nil, err
		}
		want[pos{p, o}] = true
	}
	topic := sel.Topic
	source := strings.TrimSuffix(topic, consumer.DeadLetterSuffix)
	recs, err := k.readAll(ctx, topic)
	if err != nil {
		return nil, err
	}
	if err := checkReason(sel.Filter.reason, recs); err != nil {
		return nil, err
	}
	var chosen []dlqRecord
	if sel.All {
		for _, r := range dedupe(recs) {
			switch {
			case !sel.Filter.match(r):
			case r.Truncated:
				if skipped != nil {
					skipped(r, fmt.Sprintf("a truncated copy; its original is row %d of table %s (docs/operations.md)", r.ArchiveID, orDash(r.ArchiveTable)))
				}
			default:
				chosen = append(chosen, r)
			}
		}
	} else {
		var named []dlqRecord
		for _, r := range recs {
			if want[pos{r.Partition, r.Offset}] {
				named = append(named, r)
				delete(want, pos{r.Partition, r.Offset})
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
		chosen = dedupe(named) // two copies of one dead letter are replayed once
	}

	var refusals []refusal
	refuse := func(r dlqRecord, format string, args ...any) {
		refusals = append(refusals, refusal{From: r.pos(), Why: fmt.Sprintf(format, args...)})
	}
	origins := make(map[string]map[int32][]int64) // origin topic -> partition -> offsets
	var valid []dlqRecord                         // the chosen records that name a valid origin
	for _, r := range chosen {
		switch {
		case r.Truncated:
			refuse(r, "a truncated copy; its original is row %d of table %s: replay it from there (docs/operations.md)", r.ArchiveID, orDash(r.ArchiveTable))
		case r.OriginTopic == "" || r.OriginPartition < 0 || r.OriginOffset < 0 || r.Group == "":
			refuse(r, "not a dead letter consumer.DeadLetter wrote (no valid %s, %s, %s and %s headers)",
				consumer.HeaderDLQTopic, consumer.HeaderDLQPartition, consumer.HeaderDLQOffset, consumer.HeaderDLQGroup)
		case r.OriginTopic != source && r.OriginTopic != consumer.RetryTopic(source, r.Group):
			refuse(r, "its %s %q is not %s (the topic whose dead letters %s holds) nor group %s's retry topic",
				consumer.HeaderDLQTopic, r.OriginTopic, source, topic, r.Group)
		default:
			valid = append(valid, r)
			if origins[r.OriginTopic] == nil {
				origins[r.OriginTopic] = make(map[int32][]int64)
			}
			origins[r.OriginTopic][r.OriginPartition] = append(origins[r.OriginTopic][r.OriginPartition], r.OriginOffset)
		}
	}
	if len(refusals) > 0 && !sel.All {
		return nil, refused(topic, refusals)
	}
	originals := make(map[dlqIdentity]*kgo.Record)
	originBounds := make(map[string]offsetBounds)
	for ot, parts := range origins {
		b, err := k.bounds(ctx, ot)
		if err != nil && !errors.Is(err, errNotFound) {
			return nil, err
		}
		originBounds[ot] = b
		got, err := k.readAt(ctx, ot, parts)
		if err != nil {
			return nil, err
		}
		for p, byOffset := range got {
			for o, rec := range byOffset {
				originals[dlqIdentity{topic: ot, partition: p, offset: o}] = rec
			}
		}
	}
	plan := &replayPlan{topic: topic}
	dests := make(map[string]bool)
	for _, r := range valid {
		orig := originals[dlqIdentity{topic: r.OriginTopic, partition: r.OriginPartition, offset: r.OriginOffset}]
		if orig == nil {
			if !originBounds[r.OriginTopic].wasWritten(r.OriginPartition, r.OriginOffset) {
				refuse(r, "its origin %s %d:%d was never written (past the partition's end, or no such partition): a forged dead letter",
					r.OriginTopic, r.OriginPartition, r.OriginOffset)
				continue
			}
			why := fmt.Sprintf("its origin %s %d:%d is no longer in that topic (deleted by retention): it cannot be checked",
				r.OriginTopic, r.OriginPartition, r.OriginOffset)
			if sel.All {
				if skipped != nil {
					skipped(r, why)
				}
			} else {
				refuse(r, "%s", why)
			}
			continue
		}
		if why := sameRecord(r.rec, orig); why != "" {
			refuse(r, "it is not the record at its origin %s %d:%d (%s)", r.OriginTopic, r.OriginPartition, r.OriginOffset, why)
			continue
		}
		dest := consumer.RetryTopic(source, r.Group)
		if sel.Source {
			dest = source
		}
		dests[dest] = true
		rec := &kgo.Record{Topic: dest, Key: orig.Key, Value: orig.Value, Headers: slices.Clone(orig.Headers)}
		plan.recs = append(plan.recs, rec)
		plan.items = append(plan.items, replayed{From: r.pos(), EventType: r.EventType, Key: r.Key, Group: r.Group,
			Topic: dest, Partition: -1, Offset: -1})
	}
	if len(refusals) > 0 && !sel.All {
		return nil, refused(topic, refusals)
	}
	plan.refused = refusals
	if len(dests) > 0 {
		details, err := k.adm.ListTopics(ctx, slices.Sorted(maps.Keys(dests))...)
		if err != nil {
			return nil, fmt.Errorf("sagactl: look up the replay destinations: %w (nothing replayed)", err)
		}
		var missing []string
		for d := range dests {
			if td, ok := details[d]; !ok || td.Err != nil {
				missing = append(missing, d)
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			hint := "its group consumes it with consumer.WithRetryTopics, which app.App creates; or replay to the source topic, which every group reads, with -source"
			if sel.Source {
				hint = "the source topic is gone"
			}
			return nil, fmt.Errorf("%w: destination topic(s) %s do not exist (%s) (nothing replayed)", errRefused, strings.Join(missing, ", "), hint)
		}
	}
	return plan, nil
}

func refused(topic string, refusals []refusal) error {
	why := make([]string, len(refusals))
	for i, r := range refusals {
		why[i] = r.String()
	}
	return fmt.Errorf("%w: %d record(s) of %s are not replayed, and nothing was: %s", errRefused, len(refusals), topic, strings.Join(why, "; "))
}

// sameRecord returns "" when dead is the dead-letter copy of orig (key, value and the
// original headers, followed only by choreo_dlq_* headers), or what differs.
func sameRecord(dead, orig *kgo.Record) string {
	switch {
	case !bytes.Equal(dead.Key, orig.Key):
		return "the key differs"
	case !bytes.Equal(dead.Value, orig.Value):
		return "the value differs"
	case len(dead.Headers) < len(orig.Headers):
		return "headers differ"
	}
	for i, h := range orig.Headers {
		if dead.Headers[i].Key != h.Key || !bytes.Equal(dead.Headers[i].Value, h.Value) {
			return fmt.Sprintf("header %q differs", h.Key)
		}
	}
	for _, h := range dead.Headers[len(orig.Headers):] {
		if !slices.Contains(dlqHeaders, h.Key) {
			return fmt.Sprintf("header %q is not in the original", h.Key)
		}
	}
	return ""
}

// maxReadGap is the widest gap between two wanted offsets of a partition that readAt
// reads across instead of starting a new read.
const maxReadGap = 256

// readAt returns the records of topic at the wanted offsets of each partition that are
// still in the topic, by partition and offset; offsets outside a partition's bounds
// (or a missing topic) are absent from the result.
func (k *kafka) readAt(ctx context.Context, topic string, want map[int32][]int64) (map[int32]map[int64]*kgo.Record, error) {
	out := make(map[int32]map[int64]*kgo.Record)
	b, err := k.bounds(ctx, topic)
	if errors.Is(err, errNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for p, offs := range want {
		se, ok := b[p]
		if !ok {
			continue
		}
		offs = slices.DeleteFunc(slices.Sorted(slices.Values(offs)), func(o int64) bool { return o < se[0] || o >= se[1] })
		offs = slices.Compact(offs)
		for len(offs) > 0 {
			n := 1
			for n < len(offs) && offs[n]-offs[n-1] <= maxReadGap {
				n++
			}
			recs, err := k.read(ctx, topic, map[int32]int64{p: offs[0]}, map[int32]int64{p: offs[n-1] + 1})
			if err != nil {
				return nil, err
			}
			for _, r := range recs {
				if slices.Contains(offs[:n], r.Offset) {
					if out[p] == nil {
						out[p] = make(map[int64]*kgo.Record)
					}
					out[p][r.Offset] = r.rec
				}
			}
			offs = offs[n:]
		}
	}
	return out, nil
}

// produce produces a checked plan's records, in order, and returns where each went.
func (k *kafka) produce(ctx context.Context, p *replayPlan) ([]replayed, error) {
	out := make([]replayed, 0, len(p.recs))
	for i, rec := range p.recs {
		res := p.items[i]
		pctx, cancel := context.WithTimeout(ctx, k.timeout)
		err := k.cl.ProduceSync(pctx, rec).FirstErr()
		cancel()
		if err != nil {
			return out, fmt.Errorf("sagactl: replay %s %s to %s: %w (%d replayed before it)", p.topic, res.From, rec.Topic, err, len(out))
		}
		res.Partition, res.Offset = rec.Partition, rec.Offset
		out = append(out, res)
	}
	return out, nil
}

// readCopies reads the record at partition:offset of the dead-letter topic, with Copies
// and Duplicates naming the other copies of the same dead letter in the topic.
func (k *kafka) readCopies(ctx context.Context, topic string, p int32, o int64) (dlqRecord, error) {
	r, err := k.readOne(ctx, topic, p, o) // a precise not-found error
	if err != nil {
		return dlqRecord{}, err
	}
	recs, err := k.readAll(ctx, topic)
	if err != nil {
		return dlqRecord{}, err
	}
	if c, ok := withCopies(recs, p, o); ok {
		return c, nil
	}
	return r, nil
}
