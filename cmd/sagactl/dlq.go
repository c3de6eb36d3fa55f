package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// cmdDLQ dispatches dlq list|show|replay.
func cmdDLQ(ctx context.Context, args []string, std stdio) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: dlq needs a subcommand: list, show or replay", errUsage)
	}
	switch args[0] {
	case "list", "ls":
		return cmdDLQList(ctx, args[1:], std)
	case "show":
		return cmdDLQShow(ctx, args[1:], std)
	case "replay":
		return cmdDLQReplay(ctx, args[1:], std)
	}
	return fmt.Errorf("%w: unknown dlq subcommand %q (want list, show or replay)", errUsage, args[0])
}

// dlqFilter selects records by reason and group.
type dlqFilter struct{ reason, group string }

func (f dlqFilter) match(r dlqRecord) bool {
	return (f.reason == "" || r.Reason == f.reason) && (f.group == "" || r.Group == f.group)
}

func cmdDLQList(ctx context.Context, args []string, std stdio) error {
	var (
		c conn
		f dlqFilter
	)
	fs := newFlagSet("dlq list", std, &c)
	fs.StringVar(&f.reason, "reason", "", "only records dead-lettered for this `reason` (e.g. retries_exhausted)")
	fs.StringVar(&f.group, "group", "", "only records the consumer `group` gave up on")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: sagactl dlq list [topic] [flags]\n\nWithout a topic: the dead-letter topics (*.dlq) and their record counts.\nWith a topic (orders.events or orders.events.dlq): its records with the reason each was dead-lettered.\n\nFlags:")
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return fmt.Errorf("%w: dlq list takes at most one topic", errUsage)
	}
	k, err := dialKafka(ctx, c)
	if err != nil {
		return err
	}
	defer k.close()
	if len(pos) == 0 {
		return listDLQTopics(ctx, k, c.json, std.out)
	}
	topic := dlqTopic(pos[0])
	recs, err := k.readAll(ctx, topic)
	if err != nil {
		return err
	}
	recs = slices.DeleteFunc(recs, func(r dlqRecord) bool { return !f.match(r) })
	if c.json {
		if recs == nil {
			recs = []dlqRecord{}
		}
		return writeJSON(std.out, struct {
			Topic   string      `json:"topic"`
			Records []dlqRecord `json:"records"`
		}{topic, recs})
	}
	return renderDLQList(std.out, topic, recs)
}

func renderDLQList(w io.Writer, topic string, recs []dlqRecord) error {
	if len(recs) == 0 {
		_, err := fmt.Fprintf(w, "%s: no dead-lettered records\n", topic)
		return err
	}
	t := newTable("POS", "FAILED AT", "GROUP", "REASON", "ATTEMPTS", "EVENT TYPE", "KEY", "FROM", "ERROR").right(4)
	for _, r := range recs {
		from := "-"
		if r.OriginTopic != "" {
			from = fmt.Sprintf("%s/%d@%d", r.OriginTopic, r.OriginPartition, r.OriginOffset)
		}
		failed := "-"
		if !r.FailedAt.IsZero() {
			failed = r.FailedAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		reason := orDash(r.Reason)
		if r.Truncated {
			reason += " (truncated)"
		}
		t.add(r.pos(), failed, orDash(r.Group), reason, strconv.Itoa(r.Attempts),
			orDash(r.EventType), truncate(r.Key, 40), from, truncate(orDash(r.Error), 60))
	}
	if err := t.render(w); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d record(s) in %s; details: sagactl dlq show %s %s\n", len(recs), topic, topic, recs[0].pos())
	return err
}

type dlqTopicInfo struct {
	Topic      string `json:"topic"`
	Partitions int    `json:"partitions"`
	Records    int64  `json:"records"`
	Origin     string `json:"origin_topic"`
}

func listDLQTopics(ctx context.Context, k *kafka, asJSON bool, w io.Writer) error {
	details, err := k.adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("sagactl: list topics: %w", err)
	}
	var infos []dlqTopicInfo
	for _, name := range details.Names() {
		if !strings.HasSuffix(name, consumer.DeadLetterSuffix) {
			continue
		}
		b, err := k.bounds(ctx, name)
		if err != nil {
			return err
		}
		info := dlqTopicInfo{Topic: name, Partitions: len(b), Origin: strings.TrimSuffix(name, consumer.DeadLetterSuffix)}
		for _, se := range b {
			info.Records += se[1] - se[0]
		}
		infos = append(infos, info)
	}
	if asJSON {
		if infos == nil {
			infos = []dlqTopicInfo{}
		}
		return writeJSON(w, struct {
			Topics []dlqTopicInfo `json:"topics"`
		}{infos})
	}
	if len(infos) == 0 {
		_, err := fmt.Fprintln(w, "no dead-letter topics (*.dlq)")
		return err
	}
	t := newTable("TOPIC", "PARTITIONS", "RECORDS", "REPLAYS TO").right(1, 2)
	for _, i := range infos {
		t.add(i.Topic, strconv.Itoa(i.Partitions), strconv.FormatInt(i.Records, 10), i.Origin)
	}
	return t.render(w)
}

func cmdDLQShow(ctx context.Context, args []string, std stdio) error {
	var c conn
	fs := newFlagSet("dlq show", std, &c)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: sagactl dlq show <topic> <partition:offset> [flags]\n\nShows one dead-lettered record: reason, full error, origin, key, headers and payload.\n\nFlags:")
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return fmt.Errorf("%w: dlq show takes a topic and a partition:offset", errUsage)
	}
	p, o, err := parsePos(pos[1])
	if err != nil {
		return err
	}
	k, err := dialKafka(ctx, c)
	if err != nil {
		return err
	}
	defer k.close()
	r, err := k.readOne(ctx, dlqTopic(pos[0]), p, o)
	if err != nil {
		return err
	}
	if c.json {
		return writeJSON(std.out, r)
	}
	return renderDLQRecord(std.out, r)
}

func renderDLQRecord(w io.Writer, r dlqRecord) error {
	var b strings.Builder
	fmt.Fprintf(&b, "record     %s %s\n", r.Topic, r.pos())
	fmt.Fprintf(&b, "reason     %s (after %d attempt(s), group %s)\n", orDash(r.Reason), r.Attempts, orDash(r.Group))
	if !r.FailedAt.IsZero() {
		fmt.Fprintf(&b, "failed at  %s\n", r.FailedAt.Format(time.RFC3339Nano))
	}
	if r.OriginTopic != "" {
		fmt.Fprintf(&b, "origin     %s partition %d offset %d\n", r.OriginTopic, r.OriginPartition, r.OriginOffset)
	}
	fmt.Fprintf(&b, "event      %s %s\n", orDash(r.EventType), orDash(r.EventID))
	fmt.Fprintf(&b, "key        %s\n", r.Key)
	fmt.Fprintf(&b, "error      %s\n", orDash(r.Error))
	if r.Truncated {
		fmt.Fprintf(&b, "truncated  this is a bounded copy; the original (%d bytes, sha256 %s) is row %d of table %s in the consuming service's database\n",
			r.OriginalSize, orDash(r.SHA256), r.ArchiveID, orDash(r.ArchiveTable))
	}
	b.WriteString("headers\n")
	for _, h := range r.Headers {
		fmt.Fprintf(&b, "  %s: %s\n", h.Key, h.Value)
	}
	b.WriteString("payload\n")
	if r.Value != nil {
		var pretty strings.Builder
		enc := json.NewEncoder(&pretty)
		enc.SetIndent("  ", "  ")
		var v any
		if json.Unmarshal(r.Value, &v) == nil && enc.Encode(v) == nil {
			b.WriteString("  " + pretty.String())
		} else {
			b.WriteString("  " + string(r.Value) + "\n")
		}
	} else {
		fmt.Fprintf(&b, "  %q\n", r.Text)
	}
	switch {
	case r.Truncated:
		b.WriteString("\nreplay the original from the archive (see docs/operations.md), not this copy\n")
	case r.OriginTopic != "":
		fmt.Fprintf(&b, "\nreplay it with: sagactl dlq replay %s %s\n", r.Topic, r.pos())
	}
	_, err := io.WriteString(w, b.String())
	return err
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

func cmdDLQReplay(ctx context.Context, args []string, std stdio) error {
	var (
		c conn
		f dlqFilter
	)
	fs := newFlagSet("dlq replay", std, &c)
	all := fs.Bool("all", false, "replay every record (after -reason/-group filtering)")
	dryRun := fs.Bool("dry-run", false, "show what would be replayed without producing")
	to := fs.String("to", "", "produce to this `topic` instead of each record's origin topic")
	fs.StringVar(&f.reason, "reason", "", "with -all: only records of this `reason`")
	fs.StringVar(&f.group, "group", "", "with -all: only records this consumer `group` gave up on")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: sagactl dlq replay <topic> <partition:offset>... [flags]
       sagactl dlq replay <topic> -all [-reason R] [-group G] [flags]

Produces the selected records back to the topic they were dead-lettered from, with their
original key, value and headers (the choreo_dlq_* headers removed). Truncated copies
(choreo_dlq_truncated) are refused, and skipped by -all: replay their original from the
dead-letter archive table instead. Replaying is safe to
repeat: every consumer group records the event ids it has handled (idempotency records),
so groups that already handled an event skip it, and only the group that failed handles
it again. The dead-letter topic itself is not changed (Kafka logs are append-only).

Flags:`)
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 {
		return fmt.Errorf("%w: dlq replay takes a topic", errUsage)
	}
	topic, sel := dlqTopic(pos[0]), pos[1:]
	switch {
	case *all && len(sel) > 0:
		return fmt.Errorf("%w: give record positions or -all, not both", errUsage)
	case !*all && len(sel) == 0:
		return fmt.Errorf("%w: name the records to replay (partition:offset ...) or pass -all", errUsage)
	case !*all && (f.reason != "" || f.group != ""):
		return fmt.Errorf("%w: -reason and -group filter -all", errUsage)
	}
	type key struct {
		p int32
		o int64
	}
	want := make(map[key]bool)
	for _, s := range sel {
		p, o, err := parsePos(s)
		if err != nil {
			return err
		}
		want[key{p, o}] = true
	}
	k, err := dialKafka(ctx, c)
	if err != nil {
		return err
	}
	defer k.close()
	recs, err := k.readAll(ctx, topic)
	if err != nil {
		return err
	}
	var chosen []dlqRecord
	for _, r := range recs {
		if *all && f.match(r) && r.Truncated {
			fmt.Fprintf(std.err, "sagactl: skipping %s %s: a truncated copy; its original is row %d of table %s (docs/operations.md)\n",
				topic, r.pos(), r.ArchiveID, orDash(r.ArchiveTable))
			continue
		}
		if *all && f.match(r) || want[key{r.Partition, r.Offset}] {
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
		return fmt.Errorf("%w: no record at %s in %s (nothing replayed)", errNotFound, strings.Join(missing, ", "), topic)
	}
	for _, r := range chosen {
		if r.Truncated {
			return fmt.Errorf("sagactl: %s %s is a truncated copy; its original is row %d of table %s: replay it from there (docs/operations.md) (nothing replayed)",
				topic, r.pos(), r.ArchiveID, orDash(r.ArchiveTable))
		}
		if r.OriginTopic == "" && *to == "" {
			return fmt.Errorf("sagactl: %s %s has no %s header; pass -to TOPIC (nothing replayed)",
				topic, r.pos(), consumer.HeaderDLQTopic)
		}
	}
	out := make([]replayed, 0, len(chosen))
	for _, r := range chosen {
		rec := r.replayRecord(*to)
		res := replayed{From: r.pos(), EventType: r.EventType, Key: r.Key, Topic: rec.Topic, Partition: -1, Offset: -1}
		if !*dryRun {
			pctx, cancel := context.WithTimeout(ctx, k.timeout)
			err := k.cl.ProduceSync(pctx, rec).FirstErr()
			cancel()
			if err != nil {
				return fmt.Errorf("sagactl: replay %s %s to %s: %w (%d replayed before it)", topic, r.pos(), rec.Topic, err, len(out))
			}
			res.Partition, res.Offset = rec.Partition, rec.Offset
		}
		out = append(out, res)
	}
	if c.json {
		return writeJSON(std.out, struct {
			DryRun   bool       `json:"dry_run"`
			Replayed []replayed `json:"replayed"`
		}{*dryRun, out})
	}
	return renderReplayed(std.out, out, *dryRun)
}

func renderReplayed(w io.Writer, out []replayed, dryRun bool) error {
	if len(out) == 0 {
		_, err := fmt.Fprintln(w, "nothing to replay")
		return err
	}
	t := newTable("FROM", "EVENT TYPE", "KEY", "TO", "AT")
	for _, r := range out {
		at := "(dry run)"
		if !dryRun {
			at = fmt.Sprintf("%d:%d", r.Partition, r.Offset)
		}
		t.add(r.From, orDash(r.EventType), truncate(r.Key, 40), r.Topic, at)
	}
	if err := t.render(w); err != nil {
		return err
	}
	verb := "replayed"
	if dryRun {
		verb = "would replay"
	}
	_, err := fmt.Fprintf(w, "\n%s %d record(s)\n", verb, len(out))
	return err
}
