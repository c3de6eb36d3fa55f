package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

// proxy is a TCP proxy in front of a real server, so that a test can make the server
// unreachable for one client without touching the server (which other tests share).
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.setDown(true)
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.serve(in) })
	}
}

func (p *proxy) serve(in net.Conn) {
	if !p.track(in) {
		in.Close()
		return
	}
	defer p.untrack(in)
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(out) {
		out.Close()
		return
	}
	defer p.untrack(out)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
	<-done
	in.Close()
	out.Close()
	<-done
}

// track registers c, or reports false while the proxy is down.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// setDown makes the server unreachable through the proxy (every connection is closed,
// new ones are closed as soon as they are accepted) or reachable again.
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
	}
}

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

// find returns the records whose message starts with prefix.
func (l *logRecorder) find(prefix string) []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []slog.Record
	for _, r := range l.recs {
		if strings.HasPrefix(r.Message, prefix) {
			out = append(out, r)
		}
	}
	return out
}

func attrOf(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// gaugeSum returns the sum of the data points of an int64 gauge.
func gaugeSum(t *testing.T, r *sdkmetric.ManualReader, name string) int64 {
	t.Helper()
	m, ok := collect(t, r)[name]
	if !ok {
		return 0
	}
	g, ok := m.Data.(metricdata.Gauge[int64])
	if !ok {
		t.Fatalf("%s is a %T, want an int64 gauge", name, m.Data)
	}
	var sum int64
	for _, p := range g.DataPoints {
		sum += p.Value
	}
	return sum
}

const (
	msgOutageStart = "consumer: outage: partition paused"
	msgOutageOver  = "consumer: outage over"
	msgStalled     = "consumer: partition stalled"
	msgMovingAgain = "consumer: stalled partition moving again"
)

// outageEnv is a chainEnv whose handler chain reaches Postgres and Redis through proxies.
type outageEnv struct {
	*chainEnv
	direct  *pgxpool.Pool // the same database, not through the proxy
	rdb     *redis.Client // the same Redis, not through the proxy
	pgProxy *proxy
	rdProxy *proxy
	logs    *logRecorder
	reader  *sdkmetric.ManualReader
	calls   atomic.Int64 // handler chain invocations
}

func newOutageEnv(t *testing.T) *outageEnv {
	t.Helper()
	ctx := context.Background()
	dsn := testenv.PostgresDSN(t)
	direct, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	migrateTestDB(t, direct)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pgProxy := newProxy(t, fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port))
	host, port, _ := net.SplitHostPort(pgProxy.addr())
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.ConnectTimeout = host, parsePort(t, port), 2*time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	rdDirect, ns := testenv.Redis(t) // not through the proxy; the namespace is cleaned at the end
	rdProxy := newProxy(t, testenv.RedisAddr(t))
	rdb := redis.NewClient(&redis.Options{Addr: rdProxy.addr(), DialTimeout: 2 * time.Second})
	t.Cleanup(func() { rdb.Close() })

	brokers := testenv.Kafka(t)
	return &outageEnv{
		chainEnv: &chainEnv{
			brokers:  brokers,
			topic:    testenv.Topic(t, brokers, 1),
			dlq:      testenv.Topic(t, brokers, 1),
			group:    testenv.Name(t, "g"),
			pool:     pool,
			locker:   newLocker(t, rdb, lock.WithNamespace(ns), lock.WithMaxWait(2*time.Second)),
			producer: newProducer(t, brokers),
		},
		direct:  direct,
		rdb:     rdDirect,
		pgProxy: pgProxy,
		rdProxy: rdProxy,
		logs:    &logRecorder{},
		reader:  sdkmetric.NewManualReader(),
	}
}

// leasesHeld counts the lock keys of entities ks present in Redis.
func (e *outageEnv) leasesHeld(t *testing.T, ks []string) int64 {
	t.Helper()
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = e.locker.Key(k)
	}
	n, err := e.rdb.Exists(context.Background(), names...).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// start runs a consumer with the Standard chain (and StandardBatch if batch), a quick
// outage backoff and the env's logger and meter provider.
func (e *outageEnv) start(t *testing.T, batch bool, opts ...Option) *Consumer {
	t.Helper()
	logger := slog.New(e.logs)
	cfg := StandardConfig{
		DB: e.pool, DeadLetter: e.producer,
		Locker: e.locker, Fence: true, Name: "seq", Handler: applySeq, Logger: logger,
		Retry: RetryConfig{BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond, MaxElapsed: 2 * time.Second},
	}
	h, err := Standard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	counted := func(ctx context.Context, m *Message) error {
		e.calls.Add(1)
		return h(ctx, m)
	}
	opts = append([]Option{
		WithLogger(logger), WithOutageBackoff(10*time.Millisecond, 250*time.Millisecond),
		WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))),
	}, opts...)
	if batch {
		bh, err := StandardBatch(cfg)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, WithBatch(16, bh))
	}
	c := e.consumer(t, counted, opts...)
	start(t, c)
	return c
}

// produceSeq produces seq from..to for each of ks.
func (e *outageEnv) produceSeq(t *testing.T, ks []string, from, to int) {
	t.Helper()
	var recs []*kgo.Record
	for seq := from; seq <= to; seq++ {
		for _, k := range ks {
			recs = append(recs, eventRecord(t, e.topic, "test.step", k, seqPayload{Seq: seq}))
		}
	}
	produce(t, e.producer, recs...)
}

func (e *outageEnv) effectsNow(t *testing.T) int {
	return count(t, e.direct, `SELECT count(*) FROM effects`)
}

// checkExactlyOnce asserts that every one of ks has exactly seqs effects, one per event,
// applied in order, and that nothing was dead-lettered.
func (e *outageEnv) checkExactlyOnce(t *testing.T, ks []string, seqs int) {
	t.Helper()
	if n, want := e.effectsNow(t), len(ks)*seqs; n != want {
		t.Errorf("%d effects, want %d", n, want)
	}
	if n := count(t, e.direct, `SELECT count(*) FROM (SELECT event_id FROM effects GROUP BY event_id HAVING count(*) > 1) d`); n != 0 {
		t.Errorf("%d events with more than one effect", n)
	}
	if n := count(t, e.direct, `SELECT count(*) FROM entities WHERE seq = $1`, seqs); n != len(ks) {
		t.Errorf("%d of %d keys at seq %d", n, len(ks), seqs)
	}
	if n := e.dlqLen(t); n != 0 {
		t.Errorf("%d records dead-lettered, want 0", n)
		for _, r := range readTopic(t, e.brokers, e.dlq, int(n)) {
			t.Errorf("  dead letter %s@%s: %s: %s", r.Key, header(r, HeaderDLQOffset), header(r, HeaderDLQReason), header(r, HeaderDLQError))
		}
	}
}

// waitOutage waits until Health reports an outage and the outage gauge shows it.
func (e *outageEnv) waitOutage(t *testing.T, c *Consumer) {
	t.Helper()
	waitFor(t, "Health to report the outage", func() bool { return errors.Is(c.Health(), ErrOutage) })
	if g := gaugeSum(t, e.reader, outageMetricName); g != 1 {
		t.Errorf("%s = %d during the outage, want 1", outageMetricName, g)
	}
	msg := c.Health().Error()
	for _, secret := range []string{"127.0.0.1", "user=", "password", "dial"} {
		if strings.Contains(msg, secret) {
			t.Errorf("Health names %q: %s", secret, msg)
		}
	}
	if !strings.Contains(msg, e.topic+"/0") {
		t.Errorf("Health does not name the partition: %s", msg)
	}
}

// checkRecovered asserts Health and the gauge are clear again and that the outage was
// logged exactly once when it started and once when it ended; it returns the outage's
// logged duration.
func (e *outageEnv) checkRecovered(t *testing.T, c *Consumer) time.Duration {
	t.Helper()
	waitFor(t, "Health to clear", func() bool { return c.Health() == nil })
	if g := gaugeSum(t, e.reader, outageMetricName); g != 0 {
		t.Errorf("%s = %d after the outage, want 0", outageMetricName, g)
	}
	starts, ends := e.logs.find(msgOutageStart), e.logs.find(msgOutageOver)
	if len(starts) != 1 || len(ends) != 1 {
		t.Fatalf("%d outage start and %d end log lines, want 1 and 1", len(starts), len(ends))
	}
	if starts[0].Level != slog.LevelWarn || ends[0].Level != slog.LevelInfo {
		t.Errorf("outage logged at %v and %v, want WARN and INFO", starts[0].Level, ends[0].Level)
	}
	for _, k := range []string{"topic", "partition", "offset", "error"} {
		if attrOf(starts[0], k).Kind() == slog.KindAny && attrOf(starts[0], k).Any() == nil {
			t.Errorf("outage start log lacks %q", k)
		}
	}
	if n := len(e.logs.find("consumer: handler failed")); n != 0 {
		t.Errorf("%d redelivery errors logged during the outage, want 0", n)
	}
	return attrOf(ends[0], "duration").Duration()
}

// outageWindow is how long each test keeps a dependency unavailable while records flow.
const outageWindow = 3 * time.Second

func testPostgresOutage(t *testing.T, batch bool) {
	e := newOutageEnv(t)
	c := e.start(t, batch)
	ks := keys(3)
	e.produceSeq(t, ks, 1, 10)
	waitFor(t, "the first records", func() bool { return e.effectsNow(t) == 30 })

	e.pgProxy.setDown(true)
	e.produceSeq(t, ks, 11, 15)
	e.waitOutage(t, c)
	callsAtStart := e.calls.Load()
	time.Sleep(outageWindow / 2)
	e.produceSeq(t, ks, 16, 20) // records keep arriving during the outage
	time.Sleep(outageWindow / 2)
	if !errors.Is(c.Health(), ErrOutage) {
		t.Errorf("Health during the outage: %v, want ErrOutage", c.Health())
	}
	if n := e.effectsNow(t); n != 30 {
		t.Errorf("%d effects during the outage, want 30", n)
	}
	attempts := e.calls.Load() - callsAtStart
	e.pgProxy.setDown(false)

	e.waitCommitted(t)
	e.checkExactlyOnce(t, ks, 20)
	d := e.checkRecovered(t, c)
	t.Logf("postgres unreachable for about %v (batch %v): %d attempts at the held record, outage logged as %v, nothing dead-lettered",
		outageWindow, batch, attempts, d.Round(time.Millisecond))
}

// Postgres unreachable (every connection of the consumer's pool cut, new ones refused)
// while records flow: the partition waits, nothing is dead-lettered, every record is
// handled exactly once after recovery, the outage is logged once at its start and once
// at its end, and Health and the gauge report it only while it lasts.
func TestOutagePostgres(t *testing.T) { testPostgresOutage(t, false) }

// The same in batch mode: the failed batch falls back to single records, which wait out
// the outage.
func TestOutagePostgresBatch(t *testing.T) { testPostgresOutage(t, true) }

// Redis unreachable for the locker: lock acquisition fails with network errors, which
// are an outage, not a handler failure.
func TestOutageRedis(t *testing.T) {
	e := newOutageEnv(t)
	c := e.start(t, false)
	ks := keys(3)
	e.produceSeq(t, ks, 1, 5)
	waitFor(t, "the first records", func() bool { return e.effectsNow(t) == 15 })
	// Cut Redis with no lease held: a release still on its way (sent after the commit,
	// carried by the next acquisition or after lock's short delay) would otherwise be
	// lost with the connection, and its lock would outlive the outage by up to TTL, a
	// second outage (contention) after the first.
	waitFor(t, "the first records' leases released", func() bool { return e.leasesHeld(t, ks) == 0 })

	e.rdProxy.setDown(true)
	e.produceSeq(t, ks, 6, 10)
	e.waitOutage(t, c)
	time.Sleep(outageWindow)
	if n := e.effectsNow(t); n != 15 {
		t.Errorf("%d effects while Redis was unreachable, want 15", n)
	}
	e.rdProxy.setDown(false)

	e.waitCommitted(t)
	e.checkExactlyOnce(t, ks, 10)
	d := e.checkRecovered(t, c)
	t.Logf("redis unreachable for about %v: outage logged as %v, nothing dead-lettered", outageWindow, d.Round(time.Millisecond))
}

// The handler's table renamed away (SQLSTATE 42P01, a bad deploy): the records are not
// dead-lettered, and are handled once it is back.
func TestOutageUndefinedTable(t *testing.T) {
	e := newOutageEnv(t)
	c := e.start(t, false)
	ks := keys(2)
	e.produceSeq(t, ks, 1, 3)
	waitFor(t, "the first records", func() bool { return e.effectsNow(t) == 6 })

	ctx := context.Background()
	if _, err := e.direct.Exec(ctx, `ALTER TABLE effects RENAME TO effects_away`); err != nil {
		t.Fatal(err)
	}
	e.produceSeq(t, ks, 4, 6)
	e.waitOutage(t, c)
	time.Sleep(outageWindow)
	if _, err := e.direct.Exec(ctx, `ALTER TABLE effects_away RENAME TO effects`); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(t)
	e.checkExactlyOnce(t, ks, 6)
	d := e.checkRecovered(t, c)
	starts := e.logs.find(msgOutageStart)
	if !strings.Contains(attrOf(starts[0], "error").String(), "42P01") {
		t.Errorf("outage start logged error %v, want SQLSTATE 42P01", attrOf(starts[0], "error"))
	}
	t.Logf("table missing for about %v: outage logged as %v, nothing dead-lettered", outageWindow, d.Round(time.Millisecond))
}

// A consumer shuts down promptly during an outage: the outage backoff (an hour here)
// ends when the worker stops, and the record stays unsettled for the next owner.
func TestOutageShutdownIsPrompt(t *testing.T) {
	e := newOutageEnv(t)
	c, err := New(e.brokers, e.group, []string{e.topic}, func(ctx context.Context, m *Message) error {
		return fmt.Errorf("test: %w", ErrOutage)
	}, fastGroup(), WithLogger(slog.New(e.logs)), WithOutageBackoff(time.Hour, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, c)
	e.produceSeq(t, keys(1), 1, 2)
	waitFor(t, "the outage", func() bool { return errors.Is(c.Health(), ErrOutage) })
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := committed(t, e.brokers, e.group, e.topic)[0]; got > 0 {
		t.Errorf("committed offset %d, want none: the record was not handled", got)
	}
	if n := len(e.logs.find("consumer: partition released during an outage")); n != 1 {
		t.Errorf("%d 'released during an outage' lines, want 1", n)
	}
}

// A partition whose handler hangs while records wait behind it is reported as stalled:
// in Health, in the gauge, and by one Error line; one Info line when it moves again.
func TestStalledPartition(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	group := testenv.Name(t, "g")
	logs := &logRecorder{}
	reader := sdkmetric.NewManualReader()
	release := make(chan struct{})
	var handled atomic.Int64
	c, err := New(brokers, group, []string{topic}, func(ctx context.Context, m *Message) error {
		if m.Record.Offset == 1 {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		handled.Add(1)
		return nil
	}, fastGroup(), WithLogger(slog.New(logs)), WithStallTimeout(300*time.Millisecond),
		WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	producer := newProducer(t, brokers)
	produce(t, producer, seqEvents(t, topic, []string{"k"}, 4)...)
	waitFor(t, "Health to report the stall", func() bool {
		err := c.Health()
		return err != nil && strings.Contains(err.Error(), "stalled") && strings.Contains(err.Error(), topic+"/0 at offset 1")
	})
	if errors.Is(c.Health(), ErrOutage) {
		t.Errorf("a stall reported as an outage: %v", c.Health())
	}
	if g := gaugeSum(t, reader, stalledMetricName); g != 1 {
		t.Errorf("%s = %d, want 1", stalledMetricName, g)
	}
	waitFor(t, "the stall log", func() bool { return len(logs.find(msgStalled)) > 0 })
	time.Sleep(500 * time.Millisecond) // several more monitor ticks
	stalls := logs.find(msgStalled)
	if len(stalls) != 1 || stalls[0].Level != slog.LevelError || attrOf(stalls[0], "offset").Int64() != 1 {
		t.Fatalf("stall logged %d times (%v), want once at ERROR with offset 1", len(stalls), stalls)
	}
	close(release)
	waitFor(t, "every record", func() bool { return handled.Load() == 4 })
	waitFor(t, "Health to clear", func() bool { return c.Health() == nil })
	waitFor(t, "the moving-again log", func() bool { return len(logs.find(msgMovingAgain)) == 1 })
	if g := gaugeSum(t, reader, stalledMetricName); g != 0 {
		t.Errorf("%s = %d after the stall, want 0", stalledMetricName, g)
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(logs.find(msgStalled)); n != 1 {
		t.Errorf("%d stall lines, want 1", n)
	}
}
