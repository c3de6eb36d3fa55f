package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/inventory/inventorysvc"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
	"github.com/choreo-saga/choreo/services/payment/paymentsvc"
)

// hangGuard bounds every wait for something that must happen. It only turns a hang into
// a failure; it is not a performance assertion.
const hangGuard = 90 * time.Second

// Seeds. Amounts are cents.
const (
	customerSeed = "c-1..c-20:100000000:1000000,c-poor:100000:100,c-hang:100000000:1000000"
	stockSeed    = "sku-1..sku-5:100000,sku-rare:0"
)

// system is the three services running in this process.
type system struct {
	orderURL string
	brokers  []string
	admin    *kadm.Client
	kafka    *kgo.Client
	db       map[string]*pgxpool.Pool // service -> its database, for audits
	base     map[string]string        // service -> its HTTP base URL
	http     *http.Client
}

// startSystem starts a fresh broker and the three services, each on its own database,
// and waits until all are ready. Cleanup stops them gracefully and checks that each Run
// returned nil.
func startSystem(t *testing.T) *system {
	t.Helper()
	brokers := testenv.EmptyKafka(t)
	_, ns := testenv.Redis(t)
	redisAddr := testenv.RedisAddr(t)
	s := &system{brokers: brokers, db: map[string]*pgxpool.Pool{}, base: map[string]string{}, http: &http.Client{Timeout: 30 * time.Second}}

	ctx, cancel := context.WithCancel(context.Background())
	type running struct {
		name string
		done chan error
	}
	var runs []running
	t.Cleanup(func() {
		cancel()
		for _, r := range runs {
			select {
			case err := <-r.done:
				if err != nil {
					t.Errorf("%s: Run: %v", r.name, err)
				}
			case <-time.After(hangGuard):
				t.Errorf("%s: Run did not return after cancel", r.name)
			}
		}
	})

	var readyURLs []string
	start := func(name string, env map[string]string, run func(env *app.Env, opts []app.Option) (func(context.Context) error, error)) {
		dsn := testenv.PostgresDSN(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		env["DATABASE_URL"] = dsn
		env["REDIS_ADDR"] = redisAddr
		env["KAFKA_BROKERS"] = strings.Join(brokers, ",")
		env["KAFKA_PARTITIONS"] = "4"
		env["HTTP_ADDR"] = ln.Addr().String()
		env["SHUTDOWN_TIMEOUT"] = "60s"
		opts := []app.Option{app.WithListener(ln), app.WithoutSignals(), app.WithLogOutput(io.Discard),
			app.WithLockOptions(lock.WithNamespace(ns + name + ":"))}
		fn, err := run(app.MapEnv(env), opts)
		if err != nil {
			t.Fatalf("%s: config: %v", name, err)
		}
		r := running{name: name, done: make(chan error, 1)}
		go func() { r.done <- fn(ctx) }()
		runs = append(runs, r)
		readyURLs = append(readyURLs, "http://"+ln.Addr().String()+"/readyz")
		s.base[name] = "http://" + ln.Addr().String()
		if name == "order" {
			s.orderURL = "http://" + ln.Addr().String()
		}
		pool, err := pgxpool.New(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s.db[name] = pool
	}

	start("order", map[string]string{"ORDER_SWEEP_INTERVAL": "200ms"}, func(env *app.Env, opts []app.Option) (func(context.Context) error, error) {
		cfg := ordersvc.LoadConfig(env)
		cfg.AppOptions = opts
		return func(ctx context.Context) error { return ordersvc.Run(ctx, cfg) }, env.Err()
	})
	start("payment", map[string]string{
		"PAYMENT_SEED_CUSTOMERS": customerSeed, "PAYMENT_HANG_CUSTOMERS": "c-hang",
		// Some charges fail with a retryable error, so retries run on the way.
		"PAYMENT_FAILURE_RATE": "0.05",
	}, func(env *app.Env, opts []app.Option) (func(context.Context) error, error) {
		cfg := paymentsvc.LoadConfig(env)
		cfg.AppOptions = opts
		return func(ctx context.Context) error { return paymentsvc.Run(ctx, cfg) }, env.Err()
	})
	start("inventory", map[string]string{"INVENTORY_SEED": stockSeed}, func(env *app.Env, opts []app.Option) (func(context.Context) error, error) {
		cfg := inventorysvc.LoadConfig(env)
		cfg.AppOptions = opts
		return func(ctx context.Context) error { return inventorysvc.Run(ctx, cfg) }, env.Err()
	})

	for _, u := range readyURLs {
		waitFor(t, u, func() (bool, string) {
			resp, err := s.http.Get(u)
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status
		})
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	s.kafka, s.admin = cl, kadm.NewClient(cl)
	return s
}

// waitFor polls cond until it holds; after hangGuard the test fails with cond's last
// status.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		ok, status := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// post sends a JSON request to the order API and decodes the response into out.
func (s *system) post(t *testing.T, path string, body any, key string, out any) int {
	t.Helper()
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Error(err)
			return 0
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(http.MethodPost, s.orderURL+path, rd)
	if err != nil {
		t.Error(err)
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", path, err)
		return 0
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Errorf("POST %s: decode: %v", path, err)
	}
	return resp.StatusCode
}

// waitCharged waits until the order has seen its payment (or ended).
func (s *system) waitCharged(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for time.Now().Before(deadline) {
		resp, err := s.http.Get(s.orderURL + "/orders/" + id)
		if err != nil {
			t.Errorf("GET order %s: %v", id, err)
			return
		}
		var o ordersvc.OrderJSON
		err = json.NewDecoder(resp.Body).Decode(&o)
		resp.Body.Close()
		if err != nil {
			t.Errorf("GET order %s: %v", id, err)
			return
		}
		if o.PaymentStatus != "none" || o.State.Terminal() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Errorf("order %s never saw its payment", id)
}

// count runs a count query on a service's database.
func (s *system) count(t *testing.T, service, sql string) int64 {
	t.Helper()
	var n int64
	if err := s.db[service].QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %s: %v", service, sql, err)
	}
	return n
}

var groups = []string{ordersvc.DefaultGroup, paymentsvc.DefaultGroup, inventorysvc.DefaultGroup}

// quiescent reports whether nothing is in flight any more: every outbox is empty and
// every consumer group (plus extra groups) has committed everything on its topics.
func (s *system) quiescent(t *testing.T, extraGroups ...string) (bool, string) {
	t.Helper()
	for _, svc := range []string{"order", "payment", "inventory"} {
		if n := s.count(t, svc, "SELECT count(*) FROM choreo_outbox"); n != 0 {
			return false, fmt.Sprintf("%s outbox holds %d rows", svc, n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lags, err := s.admin.Lag(ctx, append(append([]string(nil), groups...), extraGroups...)...)
	if err != nil {
		return false, err.Error()
	}
	for _, l := range lags.Sorted() {
		if err := l.Error(); err != nil {
			return false, fmt.Sprintf("group %s: %v", l.Group, err)
		}
		if n := l.Lag.Total(); n != 0 {
			return false, fmt.Sprintf("group %s lags by %d", l.Group, n)
		}
	}
	return true, ""
}

// metric sums the samples of a Prometheus counter on a service's /metrics whose lines
// contain every one of labels (e.g. `choreo_outcome="duplicate"`).
func (s *system) metric(t *testing.T, service, name string, labels ...string) float64 {
	t.Helper()
	resp, err := s.http.Get(s.base[service] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if !match {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}

// deadLettered returns the number of records in the dead-letter topics.
func (s *system) deadLettered(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var dlqs []string
	for _, t := range events.Topics {
		dlqs = append(dlqs, t+consumer.DeadLetterSuffix)
	}
	offs, err := s.admin.ListEndOffsets(ctx, dlqs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := offs.Error(); err != nil {
		t.Fatal(err)
	}
	var n int64
	offs.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// duplicator consumes the saga's topics in its own group and produces every record once
// more to the same topic and key, marked so that copies are not copied again. The copy
// lands on the record's partition after the original, usually after later events of
// the same order: a redelivery as Kafka's at-least-once delivery produces it.
type duplicator struct {
	Group  string
	copies int64
	mu     sync.Mutex
}

const duplicateHeader = "e2e-duplicate"

func startDuplicator(t *testing.T, brokers []string) *duplicator {
	t.Helper()
	d := &duplicator{Group: "e2e-duplicator"}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(d.Group),
		kgo.ConsumeTopics(events.Topics...), kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
		cl.Close()
	})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			fs.EachError(func(topic string, p int32, err error) { t.Errorf("duplicator: fetch %s/%d: %v", topic, p, err) })
			var copies []*kgo.Record
			fs.EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					if h.Key == duplicateHeader {
						return
					}
				}
				headers := append(append([]kgo.RecordHeader(nil), r.Headers...), kgo.RecordHeader{Key: duplicateHeader, Value: []byte("1")})
				copies = append(copies, &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: headers})
			})
			if len(copies) > 0 {
				if err := cl.ProduceSync(ctx, copies...).FirstErr(); err != nil {
					if ctx.Err() == nil {
						t.Errorf("duplicator: produce: %v", err)
					}
					return
				}
				d.mu.Lock()
				d.copies += int64(len(copies))
				d.mu.Unlock()
			}
			if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("duplicator: commit: %v", err)
			}
		}
	}()
	return d
}

func (d *duplicator) Copies() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.copies
}
