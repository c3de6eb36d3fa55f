package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/migrate"
)

// produceDLQ writes rec as is (any headers) and returns its position.
func produceDLQ(t *testing.T, cl *kgo.Client, rec *kgo.Record) string {
	t.Helper()
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", rec.Partition, rec.Offset)
}

// dlqHeadersFor returns the headers consumer.DeadLetter would add for a record of topic
// at partition:offset that group gave up on.
func dlqHeadersFor(topic string, partition int32, offset int64, group string) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: consumer.HeaderDLQReason, Value: []byte(consumer.ReasonPermanent)},
		{Key: consumer.HeaderDLQError, Value: []byte("customer missing")},
		{Key: consumer.HeaderDLQAttempts, Value: []byte("1")},
		{Key: consumer.HeaderDLQTopic, Value: []byte(topic)},
		{Key: consumer.HeaderDLQPartition, Value: []byte(fmt.Sprint(partition))},
		{Key: consumer.HeaderDLQOffset, Value: []byte(fmt.Sprint(offset))},
		{Key: consumer.HeaderDLQGroup, Value: []byte(group)},
		{Key: consumer.HeaderDLQFailedAt, Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))},
	}
}

// TestDLQReplayRefusesForgery writes into a dead-letter topic what an attacker who may
// write there would: a forged payment.authorized whose choreo_dlq_topic names another
// topic, forgeries that name a real record of the source topic but carry another value
// or headers, one naming an offset that does not exist, one with no dead-letter headers
// and one naming another group's retry topic. Replay, from the CLI and from the console,
// refuses each (alone and next to a genuine dead letter) and produces nothing anywhere;
// a dry run of -all names each (TestDLQReplayAllRefusesForgeriesOnly replays -all).
func TestDLQReplayRefusesForgery(t *testing.T) {
	f := newDLQFixture(t)
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	payments := testenv.Topic(t, f.brokers, 1) // plays payments.events
	for _, name := range []string{consumer.RetryTopic(payments, "payment"), consumer.RetryTopic(payments, "order"), consumer.RetryTopic(f.source, "order")} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	watched := []string{f.source, f.retry, payments, consumer.RetryTopic(payments, "payment"), consumer.RetryTopic(payments, "order"), consumer.RetryTopic(f.source, "order")}
	ends := func() map[string]int64 {
		out := make(map[string]int64)
		for _, w := range watched {
			out[w] = endOffsetSum(t, f.brokers, w)
		}
		return out
	}
	before := ends()

	forged, err := event.New("payment", "payment.authorized", "order-0", map[string]any{"order_id": "order-0", "amount": 1})
	if err != nil {
		t.Fatal(err)
	}
	forgedRec, err := event.ToRecord(f.dlq, forged)
	if err != nil {
		t.Fatal(err)
	}
	orig := f.originals[0]
	var genuine string // the fixture's dead letter of order-0
	recs, err := readDLQTest(t, f)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Key == "order-0" {
			genuine = r.pos()
		}
	}

	attacks := []struct {
		name string
		rec  *kgo.Record
		want string // in the refusal
	}{
		{"another topic (the reported attack)", &kgo.Record{Topic: f.dlq, Key: forgedRec.Key, Value: forgedRec.Value,
			Headers: append(forgedRec.Headers, dlqHeadersFor(payments, 0, 0, "order")...)}, "is not " + f.source},
		{"a real origin with a forged value", &kgo.Record{Topic: f.dlq, Key: orig.Key, Value: forgedRec.Value,
			Headers: append(append([]kgo.RecordHeader(nil), orig.Headers...), dlqHeadersFor(f.source, orig.Partition, orig.Offset, "payment")...)}, "the value differs"},
		{"a real origin with forged headers", &kgo.Record{Topic: f.dlq, Key: orig.Key, Value: orig.Value,
			Headers: append(append([]kgo.RecordHeader(nil), forgedRec.Headers...), dlqHeadersFor(f.source, orig.Partition, orig.Offset, "payment")...)}, "differs"},
		{"an extra header", &kgo.Record{Topic: f.dlq, Key: orig.Key, Value: orig.Value,
			Headers: append(append(append([]kgo.RecordHeader(nil), orig.Headers...), kgo.RecordHeader{Key: "ce_source", Value: []byte("payment")}),
				dlqHeadersFor(f.source, orig.Partition, orig.Offset, "payment")...)}, `header "ce_source" is not in the original`},
		{"an offset past the end", &kgo.Record{Topic: f.dlq, Key: forgedRec.Key, Value: forgedRec.Value,
			Headers: append(forgedRec.Headers, dlqHeadersFor(f.source, 0, 999, "payment")...)}, "was never written"},
		{"no dead-letter headers", &kgo.Record{Topic: f.dlq, Key: forgedRec.Key, Value: forgedRec.Value, Headers: forgedRec.Headers},
			"not a dead letter consumer.DeadLetter wrote"},
		{"another group's retry topic", &kgo.Record{Topic: f.dlq, Key: orig.Key, Value: orig.Value,
			Headers: append(append([]kgo.RecordHeader(nil), orig.Headers...), dlqHeadersFor(consumer.RetryTopic(f.source, "inventory"), 0, 0, "payment")...)},
			"nor group payment's retry topic"},
	}
	var forgedPos []string
	for _, a := range attacks {
		pos := produceDLQ(t, cl, a.rec)
		forgedPos = append(forgedPos, pos)
		for _, args := range [][]string{{pos}, {pos, "-dry-run"}, {pos, "-source"}, {genuine, pos}} {
			code, out, errs := sagactl(t, f.brokers, append([]string{"dlq", "replay", f.dlq}, args...)...)
			if code != exitFailure || !strings.Contains(errs, "replay refused") || !strings.Contains(errs, "nothing was") ||
				!strings.Contains(errs, pos+": ") || !strings.Contains(errs, a.want) {
				t.Errorf("%s: replay %v: exit %d, want %d and a refusal naming %s with %q:\n%s%s", a.name, args, code, exitFailure, pos, a.want, out, errs)
			}
		}
	}
	// A dry run of -all, with and without a filter, names each forgery it selects, the one
	// whose origin offset is past the end too (never written: not retention).
	for _, c := range []struct {
		args    []string
		refused []int // indexes in attacks
	}{
		{[]string{"-all", "-dry-run"}, []int{0, 1, 2, 3, 4, 5, 6}},
		{[]string{"-all", "-group", "payment", "-dry-run"}, []int{1, 2, 3, 4, 6}},
		{[]string{"-all", "-source", "-dry-run"}, []int{0, 1, 2, 3, 4, 5, 6}},
	} {
		code, _, errs := sagactl(t, f.brokers, append([]string{"dlq", "replay", f.dlq}, c.args...)...)
		if code != exitFailure || !strings.Contains(errs, "replay refused") || strings.Contains(errs, "skipping "+f.dlq+" "+forgedPos[4]) {
			t.Errorf("replay %v: exit %d: %s", c.args, code, errs)
		}
		for _, i := range c.refused {
			if !strings.Contains(errs, forgedPos[i]+": ") || !strings.Contains(errs, attacks[i].want) {
				t.Errorf("replay %v does not name the forgery %q at %s: %s", c.args, attacks[i].name, forgedPos[i], errs)
			}
		}
	}

	// The console's dry run and confirmation refuse them too.
	h := newTestConsole(t, "http://127.0.0.1:1", f.brokers...)
	list := consoleGet(t, h, "/dlq?topic="+url.QueryEscape(f.dlq))
	var cookie *http.Cookie
	for _, c := range list.Result().Cookies() {
		if c.Name == csrfCookie {
			cookie = c
		}
	}
	token := formValues(list.Body.String(), "csrf")[0]
	for _, form := range []url.Values{
		{"csrf": {token}, "rec": {f.dlq + "|" + genuine, f.dlq + "|" + forgedPos[0]}, "mode": {"replay"}},
		{"csrf": {token}, "rec": {f.dlq + "|" + forgedPos[1]}, "mode": {"replay"}},
	} {
		rec := consolePost(t, h, "/dlq/replay", form, cookie)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "replay refused") || strings.Contains(rec.Body.String(), `name="rec"`) {
			t.Errorf("console replay %v: status %d, want 400 with the refusal and nothing to confirm:\n%s", form["rec"], rec.Code, rec.Body)
		}
	}

	if after := ends(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("records were produced: end offsets %v, before %v", after, before)
	}

	// The genuine dead letter alone still replays, as the record at its origin.
	code, out, errs := sagactl(t, f.brokers, "dlq", "replay", f.dlq, genuine, "-json")
	if code != 0 {
		t.Fatalf("genuine replay: exit %d: %s", code, errs)
	}
	var rep struct{ Replayed []replayed }
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Replayed) != 1 || rep.Replayed[0].Topic != f.retry {
		t.Fatalf("genuine replay: %v %s", err, out)
	}
	got := fetchAt(t, f.brokers, f.retry, rep.Replayed[0].Partition, rep.Replayed[0].Offset)
	if string(got.Value) != string(orig.Value) || fmt.Sprint(headerList(got)) != fmt.Sprint(headerList(orig)) {
		t.Errorf("replayed %s %v, want the original %s %v", got.Value, headerList(got), orig.Value, headerList(orig))
	}
}

// readDLQTest reads the fixture's dead-letter topic as the commands do.
func readDLQTest(t *testing.T, f dlqFixture) ([]dlqRecord, error) {
	t.Helper()
	k, err := dialKafka(context.Background(), conn{brokers: strings.Join(f.brokers, ","), timeout: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	defer k.close()
	return k.readAll(context.Background(), f.dlq)
}

// TestDLQReplayMissingDestination: a replay of several dead letters, one of a group
// without a retry topic, is refused before anything is produced.
func TestDLQReplayMissingDestination(t *testing.T) {
	f := newDLQFixture(t)
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The inventory group (which has no retry topic) gives up on order-2 too.
	h := consumer.DeadLetter(cl)(func(context.Context, *consumer.Message) error {
		return consumer.Permanent(errors.New("no stock row"))
	})
	if err := h(ctx, &consumer.Message{Record: f.originals[2], Group: "inventory", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	code, _, errs := sagactl(t, f.brokers, "dlq", "replay", f.dlq, "-all")
	want := consumer.RetryTopic(f.source, "inventory")
	if code != exitFailure || !strings.Contains(errs, "destination topic(s) "+want+" do not exist") || !strings.Contains(errs, "nothing replayed") {
		t.Errorf("replay -all: exit %d: %s", code, errs)
	}
	if n := endOffsetSum(t, f.brokers, f.retry); n != 0 {
		t.Errorf("%s holds %d records, want 0: nothing may be produced before every check passed", f.retry, n)
	}
	// -source needs no retry topic: all 4 dead letters go to the source topic.
	code, out, errs := sagactl(t, f.brokers, "dlq", "replay", f.dlq, "-all", "-source")
	if code != 0 || !strings.Contains(out, "replayed 4 record(s)") {
		t.Errorf("replay -all -source: exit %d: %s%s", code, out, errs)
	}
}

// TestDLQUnknownReason: a -reason that no dead letter can have is a usage error listing
// the valid reasons, not an empty result.
func TestDLQUnknownReason(t *testing.T) {
	f := newDLQFixture(t)
	for _, args := range [][]string{
		{"dlq", "replay", f.dlq, "-all", "-reason", "malformd"},
		{"dlq", "replay", f.dlq, "-all", "-reason", "malformd", "-dry-run"},
		{"dlq", "list", f.dlq, "-reason", "malformd"},
	} {
		code, out, errs := sagactl(t, f.brokers, args...)
		if code != exitUsage || !strings.Contains(errs, `unknown reason "malformd"`) ||
			!strings.Contains(errs, strings.Join(consumer.Reasons(), ", ")) || strings.Contains(out, "nothing to replay") {
			t.Errorf("%v: exit %d, want %d listing the valid reasons:\n%s%s", args, code, exitUsage, out, errs)
		}
	}
	// A valid reason no record has is an empty result.
	code, out, errs := sagactl(t, f.brokers, "dlq", "replay", f.dlq, "-all", "-reason", consumer.ReasonPanic)
	if code != 0 || !strings.Contains(out, "nothing to replay") {
		t.Errorf("-reason panic: exit %d: %s%s", code, out, errs)
	}
}

// TestDLQCrashCopiesCountedOnce runs the real consumer runtime (consumer.Standard with
// DeadLetter) over two poison records, and simulates a kill -9 between the dead-letter
// copy's acknowledgement and the offset commit: the chain gives up the first record
// right after DeadLetter returned, so its offset is never committed. A second consumer
// in the same group then handles it again: DeadLetter finds the copy the first one
// wrote and writes none, so the dead-letter topic holds one copy per poison record. A
// second copy written anyway (by a DeadLetter that cannot read the topic, here one
// called outside the runtime) is counted and replayed once by `sagactl dlq list`,
// `dlq show`, `dlq replay` and the console.
func TestDLQCrashCopiesCountedOnce(t *testing.T) {
	brokers := testenv.Kafka(t)
	source := testenv.Topic(t, brokers, 1)
	dlq := consumer.DeadLetterTopic(source)
	pool := testenv.Postgres(t)
	ctx := context.Background()
	if err := migrate.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	group := "payment-" + source
	for _, name := range []string{dlq, consumer.RetryTopic(source, group)} {
		if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []string{`{"amount":`, `not json`} {
		rec := &kgo.Record{Topic: source, Key: []byte("order-1"), Value: []byte(v)} // undecodable: malformed
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := consumer.Standard(consumer.StandardConfig{DB: pool, DeadLetter: cl, Logger: quiet,
		Handler: func(context.Context, pgx.Tx, event.Event) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	// run runs a consumer of the group until stop reports true, then cancels it; crash
	// makes the first record's handling never return once DeadLetter wrote its copy.
	run := func(crash bool, stop func() bool) {
		t.Helper()
		var crashed atomic.Bool
		wrapped := h
		if crash {
			wrapped = func(ctx context.Context, m *consumer.Message) error {
				err := h(ctx, m)
				if m.Record.Offset == 0 && crashed.CompareAndSwap(false, true) {
					<-ctx.Done() // the process dies here: the offset is not marked
					return ctx.Err()
				}
				return err
			}
		}
		c, err := consumer.New(brokers, group, []string{source}, wrapped, consumer.WithLogger(quiet),
			consumer.WithRetryTopics(), consumer.WithShutdownTimeout(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(rctx) }()
		deadline := time.Now().Add(2 * time.Minute)
		for !stop() {
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("consumer did not get there (dlq holds %d)", endOffsetSum(t, brokers, dlq))
			}
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	run(true, func() bool { return endOffsetSum(t, brokers, dlq) >= 1 })
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if o, ok := offs.Lookup(source, 0); err == nil && ok && o.At > 0 {
		t.Fatalf("the crash committed offset %d; the test needs the first record uncommitted", o.At)
	}
	committed := func() bool {
		offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
		o, ok := offs.Lookup(source, 0)
		return err == nil && ok && o.At == 2
	}
	run(false, committed)
	if n := endOffsetSum(t, brokers, dlq); n != 2 {
		t.Fatalf("%s holds %d records after the crash and restart, want 2 (one per poison record)", dlq, n)
	}
	code, out, errs := sagactl(t, brokers, "dlq", "list", source, "-json")
	var once struct{ Records []dlqRecord }
	if err := json.Unmarshal([]byte(out), &once); code != 0 || err != nil || len(once.Records) != 2 || once.Records[0].Copies != 1 {
		t.Fatalf("dlq list %s after the restart: exit %d %v: %s%s", source, code, err, out, errs)
	}

	// A copy written again by a DeadLetter that could not look (outside the runtime).
	first0 := fetchAt(t, brokers, source, 0, 0)
	again := consumer.DeadLetter(cl)(func(context.Context, *consumer.Message) error {
		return fmt.Errorf("decode: %w", event.ErrMalformed)
	})
	if err := again(ctx, &consumer.Message{Record: first0, Group: group, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if n := endOffsetSum(t, brokers, dlq); n != 3 {
		t.Fatalf("%s holds %d records, want 3 (the first record dead-lettered twice)", dlq, n)
	}

	code, out, errs = sagactl(t, brokers, "dlq", "list", "-json")
	var topics struct{ Topics []dlqTopicInfo }
	if err := json.Unmarshal([]byte(out), &topics); code != 0 || err != nil {
		t.Fatalf("dlq list: exit %d %v: %s%s", code, err, out, errs)
	}
	for _, ti := range topics.Topics {
		if ti.Topic == dlq && (ti.Records != 2 || ti.Copies != 3) {
			t.Errorf("dlq list: %+v, want 2 dead letters in 3 copies", ti)
		}
	}
	code, out, errs = sagactl(t, brokers, "dlq", "list", source, "-json")
	var listed struct{ Records []dlqRecord }
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil || len(listed.Records) != 2 {
		t.Fatalf("dlq list %s: exit %d %v, %d records: %s%s", source, code, err, len(listed.Records), out, errs)
	}
	first := listed.Records[0]
	if first.OriginOffset != 0 || first.Copies != 2 || len(first.Duplicates) != 1 || listed.Records[1].Copies != 1 {
		t.Errorf("listed %+v, want the record at offset 0 once with 2 copies", listed.Records)
	}
	code, out, _ = sagactl(t, brokers, "dlq", "show", dlq, first.Duplicates[0])
	if code != 0 || !strings.Contains(out, "copies     2 of this dead letter") || !strings.Contains(out, "also at "+first.pos()) {
		t.Errorf("dlq show of the second copy: exit %d\n%s", code, out)
	}
	code, out, errs = sagactl(t, brokers, "dlq", "replay", dlq, "-all", "-dry-run")
	if code != 0 || !strings.Contains(out, "would replay 2 record(s)") {
		t.Errorf("replay -all: exit %d: %s%s", code, out, errs)
	}
	code, out, errs = sagactl(t, brokers, "dlq", "replay", dlq, first.pos(), first.Duplicates[0], "-dry-run")
	if code != 0 || !strings.Contains(out, "would replay 1 record(s)") {
		t.Errorf("replay of both copies: exit %d: %s%s", code, out, errs)
	}

	c := newTestConsole(t, "http://127.0.0.1:1", brokers...)
	page := consoleGet(t, c, "/dlq?topic="+url.QueryEscape(dlq))
	if body := page.Body.String(); !strings.Contains(body, "2 dead letter(s) match") || strings.Count(body, `name="rec" value=`) != 2 || !strings.Contains(body, "2 copies") {
		t.Errorf("console dead-letter page: want 2 dead letters, one marked with 2 copies:\n%s", body)
	}
	ov := consoleGet(t, c, "/api/overview")
	var overview struct {
		DeadLetters []dlqReasonCount `json:"dead_letters"`
	}
	if err := json.Unmarshal(ov.Body.Bytes(), &overview); err != nil {
		t.Fatalf("/api/overview: %v\n%s", err, ov.Body)
	}
	total := 0
	for _, d := range overview.DeadLetters {
		if d.Topic == dlq {
			total += d.Count
		}
	}
	if total != 2 {
		t.Errorf("console overview counts %d dead letters in %s, want 2: %+v", total, dlq, overview.DeadLetters)
	}
}

// TestDLQReplayAllRefusesForgeriesOnly: forged copies written into a dead-letter topic
// next to genuine dead letters (one naming a real origin with another value, one with
// an extra header, one naming another topic) do not hold back the genuine ones. `dlq
// replay -all` replays each genuine dead letter, as the record at its origin, names
// every forgery with its reason on stderr and under "refused" in -json, and exits 1;
// the console's dry run of all offers the genuine ones and lists the refused.
func TestDLQReplayAllRefusesForgeriesOnly(t *testing.T) {
	f := newDLQFixture(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	orig := f.originals[0]
	withHeaders := func(hs ...[]kgo.RecordHeader) []kgo.RecordHeader {
		var out []kgo.RecordHeader
		for _, h := range hs {
			out = append(out, h...)
		}
		return out
	}
	forged := map[string]string{ // position -> what the refusal says
		produceDLQ(t, cl, &kgo.Record{Topic: f.dlq, Key: orig.Key, Value: []byte(`{"order_id":"order-0","amount":1}`),
			Headers: withHeaders(orig.Headers, dlqHeadersFor(f.source, orig.Partition, orig.Offset, "payment"))}): "the value differs",
		produceDLQ(t, cl, &kgo.Record{Topic: f.dlq, Key: orig.Key, Value: orig.Value,
			Headers: withHeaders(orig.Headers, []kgo.RecordHeader{{Key: "ce_source", Value: []byte("payment")}},
				dlqHeadersFor(f.source, orig.Partition, orig.Offset, "payment"))}): `header "ce_source" is not in the original`,
		produceDLQ(t, cl, &kgo.Record{Topic: f.dlq, Key: orig.Key, Value: orig.Value,
			Headers: withHeaders(orig.Headers, dlqHeadersFor("payments.events", 0, 0, "payment"))}): "is not " + f.source,
		// An origin past the partition's end was never written: a forgery, not retention.
		produceDLQ(t, cl, &kgo.Record{Topic: f.dlq, Key: orig.Key, Value: orig.Value,
			Headers: withHeaders(orig.Headers, dlqHeadersFor(f.source, orig.Partition, 1<<40, "payment"))}): "was never written",
	}

	// The console's dry run of all: the genuine ones to confirm, the forged ones listed.
	h := newTestConsole(t, "http://127.0.0.1:1", f.brokers...)
	list := consoleGet(t, h, "/dlq?topic="+url.QueryEscape(f.dlq))
	var cookie *http.Cookie
	for _, c := range list.Result().Cookies() {
		if c.Name == csrfCookie {
			cookie = c
		}
	}
	token := formValues(list.Body.String(), "csrf")[0]
	preview := consolePost(t, h, "/dlq/replay", url.Values{"csrf": {token}, "all": {"1"}, "topic": {f.dlq}, "mode": {"preview"}}, cookie)
	body := preview.Body.String()
	if preview.Code != http.StatusOK || !strings.Contains(body, `id="replay-refused"`) || len(formValues(body, "rec")) != len(f.originals) {
		t.Errorf("console dry run of all: status %d, %d records to confirm (want %d) and the refused listed:\n%s",
			preview.Code, len(formValues(body, "rec")), len(f.originals), body)
	}
	for _, ref := range formValues(body, "rec") {
		if _, pos, _ := strings.Cut(ref, "|"); forged[pos] != "" {
			t.Errorf("console offers the forgery %s to replay", pos)
		}
	}
	for pos := range forged {
		if !strings.Contains(body, f.dlq+" "+pos+": ") {
			t.Errorf("console dry run does not list the refused %s", pos)
		}
	}

	before := endOffsetSum(t, f.brokers, f.retry)
	code, out, errs := sagactl(t, f.brokers, "dlq", "replay", f.dlq, "-all", "-json")
	if code != exitFailure || !strings.Contains(errs, "replay refused") {
		t.Errorf("replay -all: exit %d, want %d with the refusals on stderr: %s", code, exitFailure, errs)
	}
	for pos, want := range forged {
		if !strings.Contains(errs, pos+": ") || !strings.Contains(errs, want) {
			t.Errorf("replay -all does not name %s with %q: %s", pos, want, errs)
		}
	}
	var rep struct {
		Replayed []replayed
		Refused  []refusal
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("replay -all -json: %v\n%s", err, out)
	}
	if len(rep.Replayed) != len(f.originals) || len(rep.Refused) != len(forged) {
		t.Fatalf("replay -all: %d replayed, %d refused; want %d and %d:\n%s", len(rep.Replayed), len(rep.Refused), len(f.originals), len(forged), out)
	}
	for _, r := range rep.Refused {
		if !strings.Contains(r.Why, forged[r.From]) {
			t.Errorf("refused %s: %q, want %q", r.From, r.Why, forged[r.From])
		}
	}
	// What reached the retry topic is the three originals, nothing of the forgeries.
	byKey := map[string]*kgo.Record{}
	for _, o := range f.originals {
		byKey[string(o.Key)] = o
	}
	for _, r := range rep.Replayed {
		got := fetchAt(t, f.brokers, r.Topic, r.Partition, r.Offset)
		o := byKey[string(got.Key)]
		if r.Topic != f.retry || o == nil || string(got.Value) != string(o.Value) || fmt.Sprint(headerList(got)) != fmt.Sprint(headerList(o)) {
			t.Errorf("replayed to %s: %s %s %v, want an original to %s", r.Topic, got.Key, got.Value, headerList(got), f.retry)
		}
		delete(byKey, string(got.Key))
	}
	if after := endOffsetSum(t, f.brokers, f.retry); after-before != int64(len(f.originals)) {
		t.Errorf("%s gained %d records, want %d", f.retry, after-before, len(f.originals))
	}
}
