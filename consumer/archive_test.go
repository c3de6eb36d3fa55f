package consumer

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/migrate"
)

// archiveRow is one row of the dead-letter archive, as the tests read it.
type archiveRow struct {
	id                  int64
	group, topic        string
	partition           int32
	offset              int64
	key, value          []byte
	headers             []archiveHeader
	size                int64
	sum                 []byte
	dlqTopic, reason    string
	errText, dlqErrText string
}

func archiveRows(t testing.TB, pool *pgxpool.Pool, table string) []archiveRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id, group_name, topic, partition, "offset", key, value,
	headers, value_size, value_sha256, dlq_topic, reason, error, dlq_error FROM `+pgx.Identifier(strings.Split(table, ".")).Sanitize()+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (archiveRow, error) {
		var a archiveRow
		var headers []byte
		err := r.Scan(&a.id, &a.group, &a.topic, &a.partition, &a.offset, &a.key, &a.value, &headers,
			&a.size, &a.sum, &a.dlqTopic, &a.reason, &a.errText, &a.dlqErrText)
		if err == nil {
			err = json.Unmarshal(headers, &a.headers)
		}
		return a, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func newArchive(t testing.TB, pool *pgxpool.Pool, table string) *DeadLetterArchive {
	t.Helper()
	a, err := NewDeadLetterArchive(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(context.Background(), pool, migrate.WithDeadLetterTable(a.TableName())); err != nil {
		t.Fatal(err)
	}
	return a
}

// createTopic creates topic with one partition and the given topic configs.
func createTopic(t testing.TB, brokers []string, topic string, configs map[string]*string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// syncLog is a log destination safe for the runtime's goroutines.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// lines returns the JSON log lines whose message contains msg.
func (l *syncLog) lines(t testing.TB, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(l.buf.Bytes(), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("log line %s: %v", line, err)
		}
		if s, _ := m["msg"].(string); strings.Contains(s, msg) {
			out = append(out, m)
		}
	}
	return out
}

func headerMap(r *kgo.Record) map[string]string {
	m := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

// checkBoundedCopy checks that d is the bounded dead-letter copy of orig, archived as row.
func checkBoundedCopy(t *testing.T, d, orig *kgo.Record, row archiveRow, table string, valueBytes int) {
	t.Helper()
	h := headerMap(d)
	sum := sha256.Sum256(orig.Value)
	want := map[string]string{
		HeaderDLQTruncated:    "true",
		HeaderDLQOriginalSize: strconv.Itoa(len(orig.Value)),
		HeaderDLQSHA256:       hex.EncodeToString(sum[:]),
		HeaderDLQArchiveTable: table,
		HeaderDLQArchiveID:    strconv.FormatInt(row.id, 10),
		HeaderDLQTopic:        orig.Topic,
		HeaderDLQOffset:       strconv.FormatInt(orig.Offset, 10),
		HeaderDLQReason:       row.reason,
		event.HeaderID:        header(orig, event.HeaderID),
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("copy of offset %d: header %s = %q, want %q", orig.Offset, k, h[k], v)
		}
	}
	n := min(len(orig.Value), valueBytes)
	if !bytes.Equal(d.Value, orig.Value[:n]) {
		t.Errorf("copy of offset %d: value is %d bytes, want the first %d of the original", orig.Offset, len(d.Value), n)
	}
	if !bytes.Equal(d.Key, orig.Key) {
		t.Errorf("copy key %q, want %q", d.Key, orig.Key)
	}
	// The archive row holds the original, its value cut to DefaultArchiveValueBytes and
	// then followed by the truncation headers.
	kept := orig.Value[:min(len(orig.Value), DefaultArchiveValueBytes)]
	if !bytes.Equal(row.value, kept) || !bytes.Equal(row.key, orig.Key) || !bytes.Equal(row.sum, sum[:]) ||
		row.size != int64(len(orig.Value)) || row.offset != orig.Offset || row.topic != orig.Topic {
		t.Errorf("archive row %d does not hold the original of offset %d (size %d, value %d bytes)", row.id, orig.Offset, row.size, len(row.value))
	}
	wantHeaders := len(orig.Headers)
	if len(kept) < len(orig.Value) {
		wantHeaders += 2
	}
	if len(row.headers) != wantHeaders {
		t.Fatalf("archive row %d has %d headers, want %d", row.id, len(row.headers), wantHeaders)
	}
	for i, hh := range orig.Headers {
		if row.headers[i].Key != hh.Key || !bytes.Equal(row.headers[i].Value, hh.Value) {
			t.Errorf("archive header %d = %q:%q, want %q:%q", i, row.headers[i].Key, row.headers[i].Value, hh.Key, hh.Value)
		}
	}
}

// deadLetterRun is what the archive tests that run a consumer share: a source topic of
// one partition, its dead-letter topic, a database holding the default archive, a
// producer, and the log of the consumer that consumer starts.
type deadLetterRun struct {
	brokers  []string
	src, dlq string
	pool     *pgxpool.Pool
	archive  *DeadLetterArchive
	producer *kgo.Client
	log      syncLog
	group    string
}

// newDeadLetterRun creates the topics, the dead-letter topic with dlqConfigs, and the
// archive.
func newDeadLetterRun(t *testing.T, dlqConfigs map[string]*string) *deadLetterRun {
	t.Helper()
	d := &deadLetterRun{brokers: testenv.Kafka(t)}
	d.src = testenv.Topic(t, d.brokers, 1)
	d.dlq = DeadLetterTopic(d.src)
	createTopic(t, d.brokers, d.dlq, dlqConfigs)
	d.pool = newDB(t)
	d.archive = newArchive(t, d.pool, "")
	d.producer = newProducer(t, d.brokers)
	return d
}

// consumer returns a consumer of the source topic in a group of its own, running the
// Standard chain with a fast retry: a record whose subject is "poison" fails permanently
// and is dead-lettered (archived, its copy bounded to valueBytes, 0 for the default), the
// others are applied as applySeq does; it logs JSON to d.log.
func (d *deadLetterRun) consumer(t *testing.T, valueBytes int, opts ...Option) *Consumer {
	t.Helper()
	h, err := Standard(StandardConfig{
		DB: d.pool, DeadLetter: d.producer, DeadLetterArchive: d.archive, DeadLetterValueBytes: valueBytes,
		Handler: func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			if ev.Subject == "poison" {
				return Permanent(errors.New("poison"))
			}
			return applySeq(ctx, tx, ev)
		},
		Logger: slog.New(slog.NewJSONHandler(&d.log, nil)),
		Retry:  RetryConfig{BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	d.group = testenv.Name(t, "g")
	c, err := New(d.brokers, d.group, []string{d.src}, h, append([]Option{fastGroup(), WithDeadLetterTopicCheck()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// producePoisonThenGood produces a poison record and a good one for key k, both at seq.
func (d *deadLetterRun) producePoisonThenGood(t *testing.T, seq int) {
	t.Helper()
	produce(t, d.producer, eventRecord(t, d.src, "test.step", "poison", seqPayload{Seq: seq}),
		eventRecord(t, d.src, "test.step", "k", seqPayload{Seq: seq}))
}

// committedOffset returns the group's committed offset on the source topic.
func (d *deadLetterRun) committedOffset(t *testing.T) int64 {
	t.Helper()
	return committed(t, d.brokers, d.group, d.src)[0]
}

// Two poison records whose dead-letter copies are refused for their size, one by the
// client (a 5 MB value that compresses to almost nothing on its own topic) and one by the
// broker (the dead-letter topic's max.message.bytes), are archived whole, get a bounded
// copy each, and the partition moves on to the records behind them.
func TestDeadLetterArchiveOversize(t *testing.T) {
	d := newDeadLetterRun(t, map[string]*string{"max.message.bytes": kadm.StringPtr("16384")})
	brokers, src, dlq, pool := d.brokers, d.src, d.dlq, d.pool

	// The source topic accepts the 5 MB value: compressed it is a few kilobytes.
	big, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(8<<20),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	huge := eventRecord(t, src, "test.step", "k000", map[string]string{"blob": strings.Repeat("a", 5<<20)})
	produce(t, big, huge)
	// 64 KiB of random bytes: the dead-letter topic (16 KiB) refuses its copy.
	noise := make([]byte, 64<<10)
	rand.Read(noise)
	poison := eventRecord(t, src, "test.step", "poison", map[string]string{"noise": hex.EncodeToString(noise)})
	recs := append([]*kgo.Record{poison}, seqEvents(t, src, keys(3), 2)...)
	produce(t, d.producer, recs...)
	end := endOffsets(t, brokers, src)[0]

	const valueBytes = 4096
	r := start(t, d.consumer(t, valueBytes, WithClientOptions(kgo.FetchMaxPartitionBytes(8<<20))))
	waitFor(t, "every record settled and committed", func() bool { return d.committedOffset(t) == end })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	if n := count(t, pool, `SELECT count(*) FROM entities WHERE seq = 2`); n != 3 {
		t.Errorf("%d keys fully handled, want 3", n)
	}
	rows := archiveRows(t, pool, DefaultDeadLetterTable)
	if len(rows) != 2 {
		t.Fatalf("%d archive rows, want 2", len(rows))
	}
	copies := readTopic(t, brokers, dlq, 2)
	origs := readTopic(t, brokers, src, 2)
	for i, cp := range copies {
		checkBoundedCopy(t, cp, origs[i], rows[i], DefaultDeadLetterTable, valueBytes)
		if rows[i].group != d.group || rows[i].dlqTopic != dlq || !strings.Contains(rows[i].dlqErrText, "MESSAGE_TOO_LARGE") {
			t.Errorf("archive row %d: group %q dlq topic %q dlq error %q", rows[i].id, rows[i].group, rows[i].dlqTopic, rows[i].dlqErrText)
		}
	}
	if rows[0].reason != ReasonMalformed || !strings.Contains(rows[0].errText, "payload too large") {
		t.Errorf("huge record archived with reason %q error %q", rows[0].reason, rows[0].errText)
	}
	if rows[1].reason != ReasonPermanent || !strings.HasSuffix(rows[1].errText, ": poison") {
		t.Errorf("poison record archived with reason %q error %q", rows[1].reason, rows[1].errText)
	}
	if got := len(d.log.lines(t, "record dead_lettered")); got != 2 {
		t.Errorf("%d dead-lettered log lines, want 2", got)
	}
	if got := d.log.lines(t, "without a dead-letter copy"); len(got) != 0 {
		t.Errorf("Error lines although both copies were produced: %v", got)
	}
}

// refusedCopy produces one record to a fresh source topic and returns the brokers, the
// producer, the record as consumed, and a dead-letter topic (named apart from the source)
// whose 100-byte limit refuses any copy of it.
func refusedCopy(t *testing.T) (brokers []string, producer *kgo.Client, orig *kgo.Record, dlq string) {
	t.Helper()
	brokers = testenv.Kafka(t)
	src := testenv.Topic(t, brokers, 1)
	dlq = testenv.Name(t, "dlq")
	createTopic(t, brokers, dlq, map[string]*string{"max.message.bytes": kadm.StringPtr("100")})
	producer = newProducer(t, brokers)
	produce(t, producer, eventRecord(t, src, "test.step", "k", seqPayload{Seq: 1}))
	return brokers, producer, readTopic(t, brokers, src, 1)[0], dlq
}

// When even the bounded copy is refused, the archived record is settled anyway, with an
// Error line; a record handed over again finds its archive row instead of adding one.
func TestDeadLetterBoundedCopyRefused(t *testing.T) {
	brokers, producer, orig, dlq := refusedCopy(t)
	src := orig.Topic
	pool := newDB(t)
	if _, err := pool.Exec(context.Background(), `CREATE SCHEMA custom`); err != nil {
		t.Fatal(err)
	}
	archive := newArchive(t, pool, "custom.Dead Letters")

	var log syncLog
	mw, err := newDeadLetter(producer, deadLetterArchiveTo(archive),
		deadLetterLogger(slog.New(slog.NewJSONHandler(&log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	cause := Permanent(errors.New("bad"))
	for range 2 {
		m := &Message{Record: orig, Group: "g", Attempt: 3, deadLetterTopic: func(string) string { return dlq }}
		if err := mw(func(context.Context, *Message) error { return cause })(context.Background(), m); err != nil {
			t.Fatalf("DeadLetter returned %v; the record is archived", err)
		}
		if m.Outcome != OutcomeDeadLettered {
			t.Errorf("outcome %q", m.Outcome)
		}
	}
	rows := archiveRows(t, pool, "custom.Dead Letters")
	if len(rows) != 1 || !bytes.Equal(rows[0].value, orig.Value) {
		t.Fatalf("archive rows %+v, want one with the original", rows)
	}
	lines := log.lines(t, "bounded dead-letter copy failed")
	if len(lines) != 2 {
		t.Fatalf("%d Error lines, want 2", len(lines))
	}
	l := lines[0]
	if l["level"] != "ERROR" || l["archive_table"] != "custom.Dead Letters" || l["archive_id"] != float64(rows[0].id) ||
		l["topic"] != src || l["dlq_topic"] != dlq {
		t.Errorf("log line %v", l)
	}
	if n := endOffsets(t, brokers, dlq)[0]; n != 0 {
		t.Errorf("dead-letter topic holds %d records", n)
	}
}

// A consumer whose dead-letter topic does not exist fails at start, naming it.
func TestConsumerMissingDeadLetterTopic(t *testing.T) {
	brokers := testenv.Kafka(t)
	src := testenv.Topic(t, brokers, 1)
	other := testenv.Topic(t, brokers, 1)
	createTopic(t, brokers, DeadLetterTopic(other), nil)
	c, err := New(brokers, testenv.Name(t, "g"), []string{src, other}, func(context.Context, *Message) error { return nil },
		fastGroup(), WithDeadLetterTopicCheck())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	err = c.Run(ctx)
	if !errors.Is(err, ErrMissingTopic) || !strings.Contains(err.Error(), DeadLetterTopic(src)) ||
		strings.Contains(err.Error(), DeadLetterTopic(other)) {
		t.Fatalf("Run: %v; want ErrMissingTopic naming %s only", err, DeadLetterTopic(src))
	}
	if ctx.Err() != nil {
		t.Fatal("Run returned only when its context ended")
	}
	// The check never creates the topic.
	cl := newProducer(t, brokers)
	details, err := kadm.NewClient(cl).ListTopics(ctx, DeadLetterTopic(src))
	if err != nil {
		t.Fatal(err)
	}
	if d := details[DeadLetterTopic(src)]; !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		t.Errorf("topic %s after the check: %v", DeadLetterTopic(src), d.Err)
	}
}

// A dead-letter topic deleted while the consumer runs does not block its partition: the
// poison record is archived and settled with an Error line, and the records behind it
// are handled.
func TestDeadLetterTopicDeletedAtRunTime(t *testing.T) {
	d := newDeadLetterRun(t, nil)
	brokers, dlq, pool := d.brokers, d.dlq, d.pool
	start(t, d.consumer(t, 0))
	// A first poison record reaches the dead-letter topic, so the producer knows it.
	d.producePoisonThenGood(t, 1)
	waitFor(t, "the first records settled", func() bool { return d.committedOffset(t) == 2 })
	if n := endOffsets(t, brokers, dlq)[0]; n != 1 {
		t.Fatalf("dead-letter topic holds %d records, want 1", n)
	}

	adm := kadm.NewClient(d.producer)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp, err := adm.DeleteTopic(ctx, dlq)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	// Two more poison records, each followed by a good one.
	for i, seq := range []int{2, 3} {
		began := time.Now()
		d.producePoisonThenGood(t, seq)
		want := int64(2 + 2*(i+1))
		waitFor(t, "the partition moving past the poison record", func() bool { return d.committedOffset(t) == want })
		t.Logf("poison record %d settled through the archive %v after it was produced", i+1, time.Since(began).Round(time.Millisecond))
	}

	rows := archiveRows(t, pool, DefaultDeadLetterTable)
	if len(rows) != 2 {
		t.Fatalf("%d archive rows, want 2", len(rows))
	}
	for i, r := range rows {
		if r.offset != int64(2+2*i) || r.dlqTopic != dlq || !strings.Contains(r.dlqErrText, "UNKNOWN_TOPIC_OR_PARTITION") {
			t.Errorf("archive row %+v", r)
		}
	}
	if n := count(t, pool, `SELECT seq FROM entities WHERE key = 'k'`); n != 3 {
		t.Errorf("key k at seq %d, want 3", n)
	}
	lines := d.log.lines(t, "dead-letter topic missing")
	if len(lines) != 2 || lines[0]["level"] != "ERROR" || lines[0]["dlq_topic"] != dlq || lines[0]["offset"] != float64(2) {
		t.Errorf("Error lines %v", lines)
	}
}

// An archive that cannot be reached leaves the record unsettled: the error matches
// ErrDeadLetter and carries the database's error, so the runtime hands it over again.
func TestDeadLetterArchiveUnreachable(t *testing.T) {
	_, producer, orig, dlq := refusedCopy(t)

	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	pool, err := pgxpool.New(context.Background(), fmt.Sprintf("postgres://postgres@%s/x?sslmode=disable&connect_timeout=2", addr))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	archive, err := NewDeadLetterArchive(pool, "")
	if err != nil {
		t.Fatal(err)
	}
	mw, err := newDeadLetter(producer, deadLetterArchiveTo(archive))
	if err != nil {
		t.Fatal(err)
	}
	m := &Message{Record: orig, Group: "g", deadLetterTopic: func(string) string { return dlq }}
	cause := Permanent(errors.New("bad"))
	err = mw(func(context.Context, *Message) error { return cause })(context.Background(), m)
	// The broker's refusal is named but not wrapped: the archive's error (a connect error,
	// an outage) is what the error is classified by.
	var connErr *pgconn.ConnectError
	if !errors.Is(err, ErrDeadLetter) || !errors.Is(err, cause) || !errors.As(err, &connErr) ||
		errors.Is(err, kerr.MessageTooLarge) || !strings.Contains(err.Error(), "MESSAGE_TOO_LARGE") {
		t.Fatalf("error %v", err)
	}
	if m.Outcome == OutcomeDeadLettered {
		t.Error("outcome says dead-lettered")
	}
}

// Without an archive a refused copy is not settled.
func TestDeadLetterRefusedWithoutArchive(t *testing.T) {
	brokers := testenv.Kafka(t)
	producer := newProducer(t, brokers)
	m := &Message{Record: &kgo.Record{Topic: testenv.Name(t, "t"), Value: []byte("v")}}
	err := DeadLetter(producer)(func(context.Context, *Message) error { return Permanent(errors.New("bad")) })(context.Background(), m)
	if !errors.Is(err, ErrDeadLetter) || !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("error %v", err)
	}
}

func TestNewDeadLetterArchive(t *testing.T) {
	pool := testenv.Postgres(t)
	for _, bad := range []string{"a.b.c", ".x", "x.", "a..b"} {
		if _, err := NewDeadLetterArchive(pool, bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("table %q: %v", bad, err)
		}
	}
	if _, err := NewDeadLetterArchive(nil, ""); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil db: %v", err)
	}
	a, err := NewDeadLetterArchive(pool, `odd"name`)
	if err != nil {
		t.Fatal(err)
	}
	up := func() error {
		return migrate.Up(context.Background(), pool, migrate.WithDeadLetterTable(a.TableName()))
	}
	if s, err := migrate.SQL(migrate.WithDeadLetterTable(a.TableName())); err != nil ||
		!strings.Contains(s, `CREATE TABLE IF NOT EXISTS "odd""name"`) {
		t.Errorf("schema:\n%s (%v)", s, err)
	}
	// Several instances migrating at once, twice.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = up() })
	}
	wg.Wait()
	if err := errors.Join(append(errs, up())...); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM "odd""name"`); n != 0 {
		t.Errorf("%d rows", n)
	}
}

// A broker that is not up yet when Run starts is waited for: the check of the
// dead-letter topics does not fail the consumer, which then consumes as usual.
func TestConsumerChecksTopicsOnceTheBrokerIsUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	brokers := []string{ln.Addr().String()}
	var log syncLog
	var handled sync.WaitGroup
	handled.Add(1)
	c, err := New(brokers, testenv.Name(t, "g"), []string{"src"}, func(context.Context, *Message) error {
		handled.Done()
		return nil
	}, fastGroup(), WithDeadLetterTopicCheck(), WithLogger(slog.New(slog.NewJSONHandler(&log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, c)
	waitFor(t, "a Warn line about the unreachable broker", func() bool {
		return len(log.lines(t, "cannot check the dead-letter and retry topics yet")) == 1
	})
	cluster := testenv.KafkaCluster(t, kfake.Ports(port), kfake.SeedTopics(1, "src", DeadLetterTopic("src")))
	produce(t, newProducer(t, cluster.ListenAddrs()), &kgo.Record{Topic: "src", Value: []byte("v")})
	done := make(chan struct{})
	go func() { handled.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("the record was not handled after the broker came up")
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := len(log.lines(t, "cannot check the dead-letter and retry topics yet")); got != 1 {
		t.Errorf("%d Warn lines, want 1", got)
	}
}
