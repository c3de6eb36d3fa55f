package consumer

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// deadLetterLookback is how far before a partition's assignment DeadLetter looks
// in the dead-letter topic for copies a previous owner wrote: the previous owner's last
// commit interval plus the time the group took to hand the partition over.
const deadLetterLookback = 5 * time.Minute

// deadLetterScanTimeout bounds the one read of the dead-letter topic per assignment.
const deadLetterScanTimeout = 15 * time.Second

// deadLetterClockSkew is how far a source record's timestamp may run ahead of this
// process's clock and still be treated as written before the partition's assignment.
const deadLetterClockSkew = time.Minute

// partitionRun is one assignment of a partition to a worker: when it began, and the
// dead-letter copies a previous owner of the partition wrote (read once, when the
// first record that needs the check is dead-lettered).
type partitionRun struct {
	assigned time.Time

	mu      sync.Mutex
	scanned bool
	copies  map[copyID]bool
}

// copyID identifies a dead-letter copy: the source record and group it names, and a
// digest of its key, value and headers but DeadLetter's own (a record that names a
// source record but carries anything else is not its copy).
type copyID struct {
	topic     string
	partition int32
	offset    int64
	group     string
	content   [sha256.Size]byte
}

// dlqHeaderPrefix starts the name of every header DeadLetter adds.
const dlqHeaderPrefix = "choreo_dlq_"

// contentDigest is the SHA-256 of key, value and the headers whose keys do not start
// with dlqHeaderPrefix, each length-prefixed.
func contentDigest(key, value []byte, headers []kgo.RecordHeader) [sha256.Size]byte {
	h := sha256.New()
	field := func(b []byte) {
		h.Write(strconv.AppendInt(nil, int64(len(b)), 10))
		h.Write([]byte{':'})
		h.Write(b)
	}
	field(key)
	field(value)
	for _, hd := range headers {
		if !strings.HasPrefix(hd.Key, dlqHeaderPrefix) {
			field([]byte(hd.Key))
			field(hd.Value)
		}
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

type partitionRunKey struct{}

// withPartitionRun returns ctx carrying a new partitionRun that starts now.
func withPartitionRun(ctx context.Context) context.Context {
	return context.WithValue(ctx, partitionRunKey{}, &partitionRun{assigned: time.Now()})
}

// alreadyCopied reports whether the dead-letter topic already holds a copy of m's record
// (its source topic, partition, offset, group and value), written by a previous owner
// of the partition that was killed after the copy was acknowledged and before the
// record's offset was committed. Only records written before the partition's current
// assignment (with a minute's allowance for clock skew) can have such a copy; for every
// other record, outside the runtime and when p is not a *kgo.Client, it answers false
// without reading anything.
// The first record of an assignment that needs the check reads the dead-letter topic
// from lookback before the assignment to its end, once (at most deadLetterScanTimeout);
// later ones use what it found. A read that fails is logged at Warn and the copy is
// written: the check never holds a partition up.
func (c deadLetterConfig) alreadyCopied(ctx context.Context, p Producer, m *Message, dlqTopic string) (bool, error) {
	run, _ := ctx.Value(partitionRunKey{}).(*partitionRun)
	cl, ok := p.(*kgo.Client) // the check reads the topic with a client of the same options
	if run == nil || !ok || c.lookback <= 0 || m.Record.Timestamp.After(run.assigned.Add(deadLetterClockSkew)) {
		return false, nil
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	if !run.scanned {
		sctx, cancel := context.WithTimeout(ctx, deadLetterScanTimeout)
		defer cancel()
		copies, err := scanCopies(sctx, cl, dlqTopic, run.assigned.Add(-c.lookback), m.Record.Topic, m.Record.Partition, m.Group)
		if err != nil {
			if ctx.Err() != nil {
				return false, err
			}
			// Not readable (no READ permission on the topic, a broker error): write the
			// copy anyway; the tools count copies of one record once.
			c.logger.LogAttrs(ctx, slog.LevelWarn, "consumer: cannot look for earlier dead-letter copies; a record a previous owner dead-lettered may get a second copy",
				slog.String("group", m.Group), slog.String("topic", m.Record.Topic), slog.Int("partition", int(m.Record.Partition)),
				slog.String("dlq_topic", dlqTopic), slog.Any("error", err))
		}
		run.copies, run.scanned = copies, true
	}
	src := m.Record
	return run.copies[copyID{src.Topic, src.Partition, src.Offset, m.Group, contentDigest(src.Key, src.Value, src.Headers)}], nil
}

// scanCopies reads topic from the first record at or after since to its current end and
// returns the copies that name a record of source/partition given up by group.
func scanCopies(ctx context.Context, cl *kgo.Client, topic string, since time.Time, source string, partition int32, group string) (map[copyID]bool, error) {
	adm := kadm.NewClient(cl)
	starts, err := adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("consumer: look for earlier dead-letter copies in %s: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("consumer: look for earlier dead-letter copies in %s: %w", topic, err)
	}
	from := make(map[int32]kgo.Offset)
	pending := make(map[int32]int64)
	starts.Each(func(o kadm.ListedOffset) {
		if e, ok := ends.Lookup(topic, o.Partition); ok && o.Offset < e.Offset {
			from[o.Partition] = kgo.NewOffset().At(o.Offset)
			pending[o.Partition] = e.Offset
		}
	})
	out := make(map[copyID]bool)
	if len(from) == 0 {
		return out, nil
	}
	reader, err := kgo.NewClient(append(cl.Opts(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))...)
	if err != nil {
		return nil, fmt.Errorf("consumer: look for earlier dead-letter copies in %s: %w", topic, err)
	}
	defer reader.Close()
	for len(pending) > 0 {
		fs := reader.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return nil, fmt.Errorf("consumer: look for earlier dead-letter copies in %s: %w", topic, ferr)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			end, ok := pending[rec.Partition]
			if !ok || rec.Offset >= end {
				return
			}
			if rec.Offset+1 >= end {
				delete(pending, rec.Partition)
			}
			id, ok := copyOf(rec)
			if ok && id.topic == source && id.partition == partition && id.group == group {
				out[id] = true
			}
		})
	}
	return out, nil
}

// copyOf returns the copyID a full dead-letter copy names (a bounded copy is not one:
// its value is cut, and its original is in the archive).
func copyOf(rec *kgo.Record) (copyID, bool) {
	h := func(key string) (string, bool) {
		for i := len(rec.Headers) - 1; i >= 0; i-- {
			if rec.Headers[i].Key == key {
				return string(rec.Headers[i].Value), true
			}
		}
		return "", false
	}
	topic, ok1 := h(HeaderDLQTopic)
	ps, ok2 := h(HeaderDLQPartition)
	os, ok3 := h(HeaderDLQOffset)
	group, ok4 := h(HeaderDLQGroup)
	if truncated, _ := h(HeaderDLQTruncated); !ok1 || !ok2 || !ok3 || !ok4 || truncated == "true" {
		return copyID{}, false
	}
	p, perr := strconv.ParseInt(ps, 10, 32)
	o, oerr := strconv.ParseInt(os, 10, 64)
	if perr != nil || oerr != nil {
		return copyID{}, false
	}
	return copyID{topic, int32(p), o, group, contentDigest(rec.Key, rec.Value, rec.Headers)}, true
}
