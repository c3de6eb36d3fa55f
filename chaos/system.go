package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/internal/testenv/faultproxy"
	"github.com/choreo-saga/choreo/internal/testenv/pgcluster"
	"github.com/choreo-saga/choreo/services/events"
)

// The services of the reference system, in start order.
var services = []string{"payment", "inventory", "order"}

// Options configure the system a scenario runs against.
type Options struct {
	// ProxyPayment puts a fault proxy (internal/testenv/faultproxy) between the payment instances
	// and their Postgres and Redis, for the network scenario's faults.
	ProxyPayment bool
	// ProxyBroker puts a fault proxy between every client and devkafka, which advertises
	// the proxy's address (-advertise), so that every connection of the services, of
	// sagactl load and of the harness runs through it.
	ProxyBroker bool
	// Instances of each service (default 2).
	Instances int
	// Partitions of every topic (default 6).
	Partitions int
	// PostgresURL is the shared Postgres's maintenance database, from which the run's own
	// databases are created and dropped (default postgres://postgres@127.0.0.1:5432/postgres).
	PostgresURL string
	// MaxConns caps each instance's Postgres pool (DATABASE_MAX_CONNS; default 8), so
	// that six instances stay well within the max_connections of a shared Postgres.
	// Negative leaves DATABASE_MAX_CONNS unset: each service sizes its pool by its own
	// default (docs/operations.md, "Postgres connections").
	MaxConns int
	// Env is added to every service's environment (e.g. ORDER_SAGA_TIMEOUT).
	Env []string
	// Dir holds binaries, the broker's data and the logs; default a new temporary
	// directory, removed by Close unless KeepDir.
	Dir     string
	KeepDir bool
	// Log receives progress lines (default io.Discard).
	Log io.Writer
	// Bins, if set, is a directory that already holds the built binaries.
	Bins string
	// ApacheNodes, if 1 or 3, runs the system on an Apache Kafka cluster of that many
	// nodes (chaos/apache.go) instead of devkafka.
	ApacheNodes int
	// ServiceBins, if set, is the directory the service instances start from (the
	// upgrade scenario's previous release, see BuildRelease); default Bins.
	ServiceBins string
	// PgBouncer puts a PgBouncer of the system's own, in transaction mode, between every
	// instance's pool and Postgres (DATABASE_URL), the outbox relays' sessions staying
	// direct (DATABASE_SESSION_URL); see chaos/pgbouncer.go.
	PgBouncer bool
}

func (o *Options) defaults() {
	if o.Instances <= 0 {
		o.Instances = 2
	}
	if o.Partitions <= 0 {
		o.Partitions = 6
	}
	if o.PostgresURL == "" {
		o.PostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	if o.MaxConns == 0 {
		o.MaxConns = 8
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// System is one running copy of the reference system: devkafka on its own data dir, a
// Redis of its own, the shared Postgres with databases of its own, and Options.Instances
// processes of each service behind distinct HTTP ports, plus an HTTP balancer in front of
// the order instances that sagactl load talks to.
type System struct {
	opts  Options
	id    string // unique per System; part of database and instance names
	dir   string
	bins  string
	ownTo bool // dir is ours to remove

	kafka        *proc
	kafkaAddr    string
	apache       []*proc  // the Apache Kafka nodes (Options.ApacheNodes), node.id i at [i-1]
	apacheAddrs  []string // their client addresses
	tracker      *proc    // sagactl track, in the upgrade scenario
	redis        *proc
	redisAddr    string
	pgProxy      *faultproxy.Proxy  // between payment and Postgres (Options.ProxyPayment)
	rdProxy      *faultproxy.Proxy  // between payment and Redis (Options.ProxyPayment)
	kfProxy      *faultproxy.Proxy  // between every client and devkafka (Options.ProxyBroker)
	bouncer      *pgBouncer         // between the instances' pools and Postgres (Options.PgBouncer)
	brokers      string             // what clients bootstrap from: kafkaAddr, or kfProxy's
	paymentDBURL string             // the payment database through pgProxy
	instances    map[string][]*proc // service -> instances
	dbs          map[string]string  // service -> database name
	dbURL        map[string]string  // service -> database URL

	admin *pgxpool.Pool // maintenance database of the shared Postgres
	kcl   *kgo.Client   // the harness's own producer/reader
	adm   *kadm.Client
	http  *http.Client

	balancer   *http.Server
	balancerLn net.Listener
	next       atomic.Uint64

	mu     sync.Mutex
	closed bool

	logMu sync.Mutex // serializes logf: faults run on several goroutines and Log need not be safe
}

// Build builds the binaries the suite runs (devkafka, sagactl and the three services)
// into dir/bin once, and returns that directory.
func Build(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", fmt.Errorf("chaos: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin+string(os.PathSeparator),
		"./cmd/devkafka", "./cmd/sagactl", "./services/order", "./services/payment", "./services/inventory")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("chaos: go build: %w\n%s", err, out)
	}
	return bin, nil
}

func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("chaos: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("chaos: not inside the choreo module (go env GOMOD is empty)")
	}
	return filepath.Dir(mod), nil
}

// Start starts a fresh system and waits until every process is ready. On error,
// everything it started is stopped again.
func Start(ctx context.Context, opts Options) (s *System, err error) {
	opts.defaults()
	var idb [4]byte
	_, _ = rand.Read(idb[:])
	s = &System{opts: opts, id: hex.EncodeToString(idb[:]), instances: map[string][]*proc{},
		dbs: map[string]string{}, dbURL: map[string]string{}, http: &http.Client{Timeout: 10 * time.Second}}
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	s.dir = opts.Dir
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "choreo-chaos-"); err != nil {
			return s, fmt.Errorf("chaos: %w", err)
		}
		s.ownTo = !opts.KeepDir
	}
	if err := os.MkdirAll(filepath.Join(s.dir, "logs"), 0o755); err != nil {
		return s, fmt.Errorf("chaos: %w", err)
	}
	s.bins = opts.Bins
	if s.bins == "" {
		if s.bins, err = Build(ctx, s.dir); err != nil {
			return s, err
		}
	}
	s.logf("system %s in %s", s.id, s.dir)

	if s.admin, err = pgxpool.New(ctx, opts.PostgresURL); err != nil {
		return s, fmt.Errorf("chaos: postgres: %w", err)
	}
	if err := s.admin.Ping(ctx); err != nil {
		return s, fmt.Errorf("chaos: postgres at %s: %w (is it running? make services)", opts.PostgresURL, err)
	}
	for _, svc := range services {
		db := "chaos_" + s.id + "_" + svc
		u, err := databaseURL(opts.PostgresURL, db)
		if err != nil {
			return s, err
		}
		s.dbs[svc], s.dbURL[svc] = db, u
	}

	// Redis of its own: no persistence, so a restart starts it empty.
	rport, err := freePort()
	if err != nil {
		return s, err
	}
	s.redisAddr = "127.0.0.1:" + strconv.Itoa(rport)
	s.redis = &proc{name: "redis", path: "redis-server", logPath: s.logPath("redis"),
		args: []string{"--port", strconv.Itoa(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}}
	if err := s.startRedis(ctx); err != nil {
		return s, err
	}
	if opts.ProxyPayment {
		if err := s.startProxies(); err != nil {
			return s, err
		}
	}
	if opts.PgBouncer {
		if err := s.startPgBouncer(ctx); err != nil {
			return s, err
		}
	}

	// devkafka with every topic created at start, so that a restart on the data dir
	// finds them.
	kport, err := freePort()
	if err != nil {
		return s, err
	}
	s.kafkaAddr = "127.0.0.1:" + strconv.Itoa(kport)
	s.brokers = s.kafkaAddr
	var topics []string
	for _, t := range events.Topics {
		topics = append(topics, t, consumer.DeadLetterTopic(t))
	}
	s.kafka = &proc{name: "devkafka", path: filepath.Join(s.bins, "devkafka"), logPath: s.logPath("devkafka"),
		args: []string{"-port", strconv.Itoa(kport), "-data-dir", filepath.Join(s.dir, "kafka"),
			"-partitions", strconv.Itoa(opts.Partitions), "-topics", strings.Join(topics, ",")}}
	if opts.ProxyBroker {
		// The proxy dials devkafka per connection, so it may start first.
		if s.kfProxy, err = faultproxy.Start("127.0.0.1:0", s.kafkaAddr); err != nil {
			return s, fmt.Errorf("chaos: %w", err)
		}
		s.brokers = s.kfProxy.Addr()
		s.kafka.args = append(s.kafka.args, "-advertise", s.brokers)
		s.logf("every client reaches devkafka (%s) through %s", s.kafkaAddr, s.brokers)
	}
	if opts.ApacheNodes > 0 {
		s.kafka = nil
		err = s.startApache(ctx)
	} else {
		err = s.startKafka(ctx)
	}
	if err != nil {
		return s, err
	}
	if s.kcl, err = kgo.NewClient(kgo.SeedBrokers(s.seeds()...), kgo.ProducerBatchMaxBytes(16<<20),
		kgo.MaxBufferedBytes(64<<20), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()), kgo.FetchMaxBytes(64<<20)); err != nil {
		return s, fmt.Errorf("chaos: kafka client: %w", err)
	}
	s.adm = kadm.NewClient(s.kcl)

	for _, svc := range services {
		for i := range opts.Instances {
			p, err := s.newInstance(svc, i+1)
			if err != nil {
				return s, err
			}
			s.instances[svc] = append(s.instances[svc], p)
			if err := p.start(); err != nil {
				return s, err
			}
		}
		// Instances of one service start together; the first creates the database.
		for _, p := range s.instances[svc] {
			rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			err := p.waitReady(rctx, s.http)
			cancel()
			if err != nil {
				return s, err
			}
		}
	}
	if err := s.startBalancer(); err != nil {
		return s, err
	}
	s.logf("ready: brokers %s, redis %s, order API (balanced over %d instances) %s",
		s.kafkaAddr, s.redisAddr, opts.Instances, s.OrderURL())
	return s, nil
}

func databaseURL(base, db string) (string, error) {
	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		return "", fmt.Errorf("chaos: postgres URL: %w", err)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, db), nil
}

func (s *System) logPath(name string) string { return filepath.Join(s.dir, "logs", name+".log") }

func (s *System) logf(format string, args ...any) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.opts.Log, "chaos: "+format+"\n", args...)
}

func (s *System) startRedis(ctx context.Context) error {
	if err := s.redis.start(); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return pgcluster.WaitTCP(rctx, s.redisAddr)
}

func (s *System) startKafka(ctx context.Context) error {
	if err := s.kafka.start(); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return pgcluster.WaitTCP(rctx, s.kafkaAddr)
}

// newInstance prepares instance i of svc: its own HTTP port and instance id.
func (s *System) newInstance(svc string, i int) (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s-%d", svc, i)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	dbURL, redisAddr := s.dbURL[svc], s.redisAddr
	if svc == "payment" && s.pgProxy != nil {
		dbURL, redisAddr = s.paymentDBURL, s.rdProxy.Addr()
	}
	env := []string{
		"DATABASE_URL=" + dbURL,
		"REDIS_ADDR=" + redisAddr,
		"KAFKA_BROKERS=" + s.brokers,
		"KAFKA_PARTITIONS=" + strconv.Itoa(s.opts.Partitions),
		"KAFKA_INSTANCE_ID=" + name,
		"HTTP_ADDR=" + addr,
		"ADMIN_ADDR=127.0.0.1:0", // the default (HTTP port + 1000) may be taken on a machine of free ports
		"LOG_LEVEL=info",
		"SHUTDOWN_TIMEOUT=5s",
		"PAYMENT_HANG_CUSTOMERS=none",
		"OTEL_TRACES_EXPORTER=none",
		"OTEL_METRICS_EXPORTER=none",
	}
	if s.opts.MaxConns > 0 {
		env = append(env, "DATABASE_MAX_CONNS="+strconv.Itoa(s.opts.MaxConns))
	}
	if s.bouncer != nil {
		benv, err := s.bouncer.env(dbURL)
		if err != nil {
			return nil, err
		}
		env = append(env, benv...)
	}
	env = append(env, s.opts.Env...)
	bins := s.bins
	if s.opts.ServiceBins != "" {
		bins = s.opts.ServiceBins
	}
	return &proc{name: name, path: filepath.Join(bins, svc), env: env, logPath: s.logPath(name),
		ready: "http://" + addr + "/readyz"}, nil
}

// OrderURL is the base URL of the balancer in front of the order instances.
func (s *System) OrderURL() string { return "http://" + s.balancerLn.Addr().String() }

// Brokers is the address clients bootstrap from: devkafka's, or its proxy's
// (Options.ProxyBroker).
func (s *System) Brokers() string { return s.brokers }

// Dir is the system's working directory (logs are in Dir/logs).
func (s *System) Dir() string { return s.dir }

// all returns every service instance.
func (s *System) all() []*proc {
	var out []*proc
	for _, svc := range services {
		out = append(out, s.instances[svc]...)
	}
	return out
}

// startBalancer serves the order API by forwarding each request to the order instances
// in turn, trying the next one when an instance does not accept the connection (it was
// just killed), so load keeps flowing while instances die and restart.
func (s *System) startBalancer() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("chaos: balancer: %w", err)
	}
	s.balancerLn = ln
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	orders := s.instances["order"]
	s.balancer = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		start := s.next.Add(1)
		var lastErr error
		for i := range uint64(len(orders)) {
			p := orders[(start+i)%uint64(len(orders))]
			base := strings.TrimSuffix(p.ready, "/readyz")
			req, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.RequestURI(), strings.NewReader(string(body)))
			if err != nil {
				lastErr = err
				continue
			}
			req.Header = r.Header.Clone()
			resp, err := client.Do(req)
			if err != nil {
				lastErr = err
				continue // not reachable: the next instance
			}
			defer resp.Body.Close()
			for k, v := range resp.Header {
				w.Header()[k] = v
			}
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
			return
		}
		http.Error(w, fmt.Sprintf("chaos balancer: no order instance answered: %v", lastErr), http.StatusBadGateway)
	})}
	go func() { _ = s.balancer.Serve(ln) }()
	return nil
}

// Close stops every process the system started (also paused ones), drops its databases
// and removes its directory (unless kept). It is safe to call more than once.
func (s *System) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	if s.balancer != nil {
		_ = s.balancer.Close()
	}
	var wg sync.WaitGroup
	for _, p := range s.all() {
		wg.Go(func() { p.stop(8 * time.Second) })
	}
	if s.tracker != nil {
		wg.Go(func() { s.tracker.stop(8 * time.Second) })
	}
	wg.Wait()
	if s.bouncer != nil {
		s.bouncer.proc.stop(5 * time.Second)
	}
	for _, px := range []*faultproxy.Proxy{s.pgProxy, s.rdProxy} {
		if px != nil {
			_ = px.Close()
		}
	}
	if s.kcl != nil {
		s.kcl.Close()
	}
	if s.kafka != nil {
		s.kafka.stop(5 * time.Second)
	}
	s.stopApache()
	if s.kfProxy != nil {
		_ = s.kfProxy.Close()
	}
	if s.redis != nil {
		s.redis.stop(5 * time.Second)
	}
	if s.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for _, db := range s.dbs {
			_, _ = s.admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" WITH ALLOW_CONNECTIONS true")
			if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
				s.logf("drop database %s: %v", db, err)
			}
		}
		cancel()
		s.admin.Close()
	}
	if s.ownTo {
		_ = os.RemoveAll(s.dir)
	} else if s.dir != "" {
		s.logf("logs kept in %s", filepath.Join(s.dir, "logs"))
	}
}

// pool opens a small pool on svc's database, for the checks.
func (s *System) pool(ctx context.Context, svc string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(s.dbURL[svc])
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	cfg.MaxConns = 2
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("chaos: open %s database: %w", svc, err)
	}
	return p, nil
}

// relayLeader returns the instance of svc whose session holds the outbox relay's
// advisory lock, found through pg_locks and the client port of that session.
func (s *System) relayLeader(ctx context.Context, svc string) (*proc, error) {
	rows, err := s.admin.Query(ctx, `SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND a.datname = $1 AND a.application_name LIKE 'choreo-outbox-relay%'
		AND a.client_port IS NOT NULL`, s.dbs[svc])
	if err != nil {
		return nil, fmt.Errorf("chaos: find the relay leader of %s: %w", svc, err)
	}
	ports, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("chaos: find the relay leader of %s: %w", svc, err)
	}
	for _, port := range ports {
		if p := ownerOfPort(int(port), s.instances[svc]); p != nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("chaos: no instance of %s holds the relay lock (sessions on ports %v)", svc, ports)
}

// ready reports whether p answers its readiness check now.
func (s *System) ready(ctx context.Context, p *proc) bool {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, p.ready, nil)
	if err != nil {
		return false
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// restart starts p again and waits until it is ready (bounded).
func (s *System) restart(ctx context.Context, p *proc, bound time.Duration) error {
	if err := p.start(); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	return p.waitReady(rctx, s.http)
}

// groups lists the consumer groups known to the broker, sorted.
func (s *System) groups(ctx context.Context) ([]string, error) {
	ls, err := s.adm.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("chaos: list groups: %w", err)
	}
	gs := ls.Groups()
	slices.Sort(gs)
	return gs, nil
}

// A NetPath is a network path the harness puts fault proxies on; its value names it
// in the report.
type NetPath string

// Network paths.
const (
	// PathPaymentStores: between the payment instances and their Postgres and Redis
	// (Options.ProxyPayment).
	PathPaymentStores NetPath = "payment ↔ postgres, redis"
	// PathBroker: between every client and devkafka (Options.ProxyBroker).
	PathBroker NetPath = "clients ↔ devkafka"
)

// proxies returns the fault proxies on path, none if the system has none there.
func (s *System) proxies(path NetPath) []*faultproxy.Proxy {
	switch {
	case path == PathPaymentStores && s.pgProxy != nil:
		return []*faultproxy.Proxy{s.pgProxy, s.rdProxy}
	case path == PathBroker && s.kfProxy != nil:
		return []*faultproxy.Proxy{s.kfProxy}
	}
	return nil
}

// startProxies starts the fault proxies between the payment instances and their Postgres
// and Redis.
func (s *System) startProxies() error {
	cfg, err := pgx.ParseConfig(s.dbURL["payment"])
	if err != nil {
		return fmt.Errorf("chaos: postgres URL: %w", err)
	}
	if s.pgProxy, err = faultproxy.Start("127.0.0.1:0", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if s.rdProxy, err = faultproxy.Start("127.0.0.1:0", s.redisAddr); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	u, err := url.Parse(s.dbURL["payment"])
	if err != nil {
		return fmt.Errorf("chaos: postgres URL: %w", err)
	}
	u.Host = s.pgProxy.Addr()
	s.paymentDBURL = u.String()
	s.logf("payment reaches Postgres through %s and Redis through %s", s.pgProxy.Addr(), s.rdProxy.Addr())
	return nil
}
