package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/choreo-saga/choreo/consumer"
)

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

func cmdDLQList(ctx context.Context, args []string, std stdio) error {
	var (
		c conn
		f dlqFilter
	)
	fs := newFlagSet("dlq list", std, &c)
	fs.StringVar(&f.reason, "reason", "", "only records dead-lettered for this `reason` (e.g. retries_exhausted)")
	fs.StringVar(&f.group, "group", "", "only records the consumer `group` gave up on")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: sagactl dlq list [topic] [flags]

Without a topic: the dead-letter topics (*.dlq) and how many dead letters each holds.
With a topic (orders.events or orders.events.dlq): its dead letters with the reason each
was dead-lettered. A dead letter is one source record given up by one group; copies of
it (written again after a consumer was killed before committing its offset) are listed
once, with the positions of the other copies (COPIES, and "duplicates" in -json).
An unknown -reason is an error that lists the valid ones.

Flags:`)
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
	recs, err := k.readDLQ(ctx, topic)
	if err != nil {
		return err
	}
	if err := checkReason(f.reason, recs); err != nil {
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
		_, err := printf(w, "%s: no dead-lettered records\n", topic)
		return err
	}
	t := newTable("POS", "FAILED AT", "GROUP", "REASON", "ATTEMPTS", "COPIES", "EVENT TYPE", "KEY", "FROM", "ERROR").right(4, 5)
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
		t.add(r.pos(), failed, orDash(r.Group), reason, strconv.Itoa(r.Attempts), strconv.Itoa(max(r.Copies, 1)),
			orDash(r.EventType), truncate(r.Key, 40), from, truncate(orDash(r.Error), 60))
	}
	if err := t.render(w); err != nil {
		return err
	}
	_, err := printf(w, "\n%d dead letter(s) in %s; details: sagactl dlq show %s %s\n", len(recs), topic, topic, recs[0].pos())
	return err
}

type dlqTopicInfo struct {
	Topic      string `json:"topic"`
	Partitions int    `json:"partitions"`
	Records    int64  `json:"records"` // dead letters, each counted once
	Copies     int64  `json:"copies"`  // records in the topic, copies included
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
		recs, err := k.readDLQ(ctx, name)
		if err != nil {
			return err
		}
		info := dlqTopicInfo{Topic: name, Partitions: len(b), Origin: strings.TrimSuffix(name, consumer.DeadLetterSuffix), Records: int64(len(recs))}
		for _, r := range recs {
			info.Copies += int64(max(r.Copies, 1))
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
	t := newTable("TOPIC", "PARTITIONS", "DEAD LETTERS", "COPIES", "SOURCE").right(1, 2, 3)
	for _, i := range infos {
		t.add(i.Topic, strconv.Itoa(i.Partitions), strconv.FormatInt(i.Records, 10), strconv.FormatInt(i.Copies, 10), i.Origin)
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
	r, err := k.readCopies(ctx, dlqTopic(pos[0]), p, o)
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
	printf(&b, "record     %s %s\n", r.Topic, r.pos())
	printf(&b, "reason     %s (after %d attempt(s), group %s)\n", orDash(r.Reason), r.Attempts, orDash(r.Group))
	if !r.FailedAt.IsZero() {
		printf(&b, "failed at  %s\n", r.FailedAt.Format(time.RFC3339Nano))
	}
	if r.OriginTopic != "" {
		printf(&b, "origin     %s partition %d offset %d\n", r.OriginTopic, r.OriginPartition, r.OriginOffset)
	}
	if len(r.Duplicates) > 0 {
		printf(&b, "copies     %d of this dead letter (same origin and group): also at %s\n", r.Copies, strings.Join(r.Duplicates, ", "))
	}
	printf(&b, "event      %s %s\n", orDash(r.EventType), orDash(r.EventID))
	printf(&b, "key        %s\n", r.Key)
	printf(&b, "error      %s\n", orDash(r.Error))
	if r.Truncated {
		printf(&b, "truncated  this is a bounded copy; the original (%d bytes, sha256 %s) is row %d of table %s in the consuming service's database\n",
			r.OriginalSize, orDash(r.SHA256), r.ArchiveID, orDash(r.ArchiveTable))
	}
	b.WriteString("headers\n")
	for _, h := range r.Headers {
		printf(&b, "  %s: %s\n", h.Key, h.Value)
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
			b.WriteString("  " + safeText(string(r.Value)) + "\n")
		}
	} else {
		fmt.Fprintf(&b, "  %q\n", r.Text)
	}
	switch {
	case r.Truncated:
		b.WriteString("\nreplay the original from the archive (see docs/operations.md), not this copy\n")
	case r.OriginTopic != "":
		printf(&b, "\nreplay it with: sagactl dlq replay %s %s\n", r.Topic, r.pos())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func cmdDLQReplay(ctx context.Context, args []string, std stdio) error {
	var (
		c   conn
		sel replaySelection
	)
	fs := newFlagSet("dlq replay", std, &c)
	fs.BoolVar(&sel.All, "all", false, "replay every record (after -reason/-group filtering)")
	fs.BoolVar(&sel.DryRun, "dry-run", false, "show what would be replayed without producing")
	fs.BoolVar(&sel.Source, "source", false, "republish to the source topic, which every consumer group of it reads, instead of the retry topic of the group that dead-lettered each record")
	fs.StringVar(&sel.Filter.reason, "reason", "", "with -all: only records of this `reason`")
	fs.StringVar(&sel.Filter.group, "group", "", "with -all: only records this consumer `group` gave up on")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: sagactl dlq replay <topic> <partition:offset>... [flags]
       sagactl dlq replay <topic> -all [-reason R] [-group G] [flags]

Produces the selected dead letters again, for the consumer group that gave up on each:
to that group's retry topic "<source>.retry.<group>", which only that group reads (its
consumer subscribes it with consumer.WithRetryTopics, as every app.App consumer does),
so replaying a payment failure does not hand the event to inventory again. With -source
they go to the source topic instead, which every group of it reads.

Only records consumer.DeadLetter wrote for this topic are replayed: each must name its
origin (choreo_dlq_topic/_partition/_offset, the source topic or the group's retry
topic) and group, and the origin record must still be in its topic with the same key,
value and headers; what is produced is that origin record, read back. A named record
that fails a check, a destination that does not exist, an unknown -reason or a missing
position refuses the whole replay before anything is produced. With -all, a record
that fails a check (a forged or altered copy, or one naming another topic) is refused
on its own: the others are replayed, the refused ones are named on stderr (and under
"refused" with -json), and the exit status is 1. Truncated copies (choreo_dlq_truncated)
are refused, and skipped by -all: replay their original from the dead-letter archive
table instead; -all also skips, with a line each, records whose origin is no longer in
its topic (retention). Copies of one dead letter are replayed once.

Replaying is safe to repeat: a group records the event ids it has handled
(idempotency records) and skips one it has seen. The dead-letter topic itself is not
changed (Kafka logs are append-only). The console's dead-letter page (sagactl console)
replays through the same code.

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
	sel.Topic, sel.Positions = dlqTopic(pos[0]), pos[1:]
	if err := sel.validate(); err != nil {
		return err
	}
	k, err := dialKafka(ctx, c)
	if err != nil {
		return err
	}
	defer k.close()
	p, err := k.plan(ctx, sel, func(r dlqRecord, why string) {
		printf(std.err, "sagactl: skipping %s %s: %s\n", sel.Topic, r.pos(), why)
	})
	if err != nil {
		return err
	}
	out := p.items
	if !sel.DryRun {
		if out, err = k.produce(ctx, p); err != nil {
			return err
		}
	}
	if c.json {
		refused := p.refused
		if refused == nil {
			refused = []refusal{}
		}
		err = writeJSON(std.out, struct {
			DryRun   bool       `json:"dry_run"`
			Replayed []replayed `json:"replayed"`
			Refused  []refusal  `json:"refused"`
		}{sel.DryRun, out, refused})
	} else {
		err = renderReplayed(std.out, out, sel.DryRun)
	}
	if err != nil {
		return err
	}
	// -all: the genuine records are replayed; the refused ones fail the command.
	return p.refusedError()
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
