package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/tracker"
)

// Defaults of the console's flags.
const (
	defaultConsoleAddr = "127.0.0.1:8090"
	// defaultConsoleMetrics are the admin listeners of the three services when they run
	// with their default HTTP_ADDR (admin port = HTTP port + 1000).
	defaultConsoleMetrics = "order=http://127.0.0.1:9080/metrics,payment=http://127.0.0.1:9081/metrics,inventory=http://127.0.0.1:9082/metrics"
	// consoleRefresh is how often the overview page polls /api/overview.
	consoleRefresh = 5 * time.Second
)

// metricsTarget is one service's Prometheus endpoint.
type metricsTarget struct{ Service, URL string }

// parseMetricsTargets parses "name=url,name=url".
func parseMetricsTargets(s string) ([]metricsTarget, error) {
	var out []metricsTarget
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, u, ok := strings.Cut(part, "=")
		pu, err := url.Parse(u)
		if !ok || name == "" || err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return nil, fmt.Errorf("%w: -metrics entry %q must be service=http(s)://host:port/metrics", errUsage, name+"="+redactURL(u))
		}
		out = append(out, metricsTarget{Service: name, URL: u})
	}
	return out, nil
}

func cmdConsole(ctx context.Context, args []string, std stdio) error {
	var c conn
	fs := newFlagSet("console", std, &c)
	addr := fs.String("addr", envOr(std.getenv, "CONSOLE_ADDR", defaultConsoleAddr),
		"listen `address` of the console (env CONSOLE_ADDR; keep it on loopback: the console can cancel orders and replay dead letters)")
	token := fs.String("token", "",
		"access `token` the console requires of every request, as the password of HTTP Basic authentication (any user name) or a bearer token (env CONSOLE_TOKEN); required to listen beyond loopback")
	hosts := fs.String("hosts", envOr(std.getenv, "CONSOLE_HOSTS", ""),
		"comma-separated host `names` the console answers to besides loopback names and IP addresses (env CONSOLE_HOSTS), e.g. ops.example.com")
	metrics := fs.String("metrics", envOr(std.getenv, "CONSOLE_METRICS", defaultConsoleMetrics),
		"comma-separated `service=URL` of the services' /metrics on their admin listeners, for the outbox backlog (env CONSOLE_METRICS)")
	metricsToken := fs.String("metrics-token", "",
		"bearer `token` sent to every -metrics URL: the services' ADMIN_TOKEN (env ADMIN_TOKEN; prefer the environment: flags show in ps)")
	trackerDB := fs.String("tracker-db", std.getenv("TRACKER_DATABASE_URL"),
		"Postgres connection `URL` of the saga tracker's index (env TRACKER_DATABASE_URL); with it the console shows the tracker's sagas (sagactl track)")
	trackerConfig := fs.String("tracker-config", std.getenv("TRACKER_CONFIG"),
		"comma-separated saga declaration `files` the tracker runs with (env TRACKER_CONFIG); required with -tracker-db")
	jaegerQuery := fs.String("jaeger-query", std.getenv("JAEGER_QUERY_URL"),
		"base `URL` of Jaeger's query API (env JAEGER_QUERY_URL), e.g. http://127.0.0.1:16686; with it the order and saga pages draw the saga's trace as a span waterfall")
	jaegerUI := fs.String("jaeger-ui", std.getenv("JAEGER_UI_URL"),
		"base `URL` of the Jaeger UI (env JAEGER_UI_URL); with it the waterfall links to the trace there (unset: no link)")
	trackerTable := fs.String("tracker-table", tracker.DefaultTable, "the tracker's index table `name` (as sagactl track -table)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: sagactl console [-addr 127.0.0.1:8090] [-metrics order=URL,...] [flags]

Serves the operations console: an overview (orders by state, stuck orders, dead letters
per topic and reason, consumer lag, outbox backlog; refreshed live), each order's
timeline with its trace (with -jaeger-query, the trace's spans as a waterfall read
from Jaeger), and the dead letters with replay (the code of dlq replay).
With -tracker-db and -tracker-config it also reads the saga tracker's index (sagactl
track): sagas of every declared kind by status, the stuck ones with what they wait for,
and each correlation id's timeline across services with its dead letters.
It reads the order API, the topics, the services' metrics and the tracker's index and
keeps no state.

Flags:`)
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: console takes no arguments", errUsage)
	}
	if *token == "" {
		*token = std.getenv("CONSOLE_TOKEN")
	}
	if *metricsToken == "" {
		*metricsToken = std.getenv("ADMIN_TOKEN")
	}
	targets, err := parseMetricsTargets(*metrics)
	if err != nil {
		return err
	}
	if _, _, err := c.clientOptions([]string{"x"}); err != nil {
		return err
	}
	srv, err := newConsole(c, targets)
	if err != nil {
		return err
	}
	defer srv.close()
	if srv.jaeger, err = newJaegerClient(*jaegerQuery, *jaegerUI, c.timeout); err != nil {
		return err
	}
	if *trackerDB != "" {
		cfg, err := loadTrackConfigs(*trackerConfig)
		if err != nil {
			return err
		}
		pool, err := trackerPool(ctx, *trackerDB, c.timeout)
		if err != nil {
			return err
		}
		defer pool.Close()
		if srv.tr, err = tracker.New(pool, cfg, tracker.WithTable(*trackerTable)); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		defer srv.tr.Close() //nolint:errcheck
	} else {
		var given bool
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == "tracker-config" })
		if given {
			return fmt.Errorf("%w: -tracker-config needs -tracker-db (or TRACKER_DATABASE_URL)", errUsage)
		}
	}
	srv.token, srv.metricsToken = *token, *metricsToken
	for h := range strings.SplitSeq(*hosts, ",") {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			srv.hosts[h] = true
		}
	}
	if _, _, err := net.SplitHostPort(*addr); err == nil && !app.Loopback(*addr) && srv.token == "" {
		return fmt.Errorf("%w: the console can cancel orders and replay dead letters: to listen on %s, beyond loopback, set an access token (-token or CONSOLE_TOKEN)", errUsage, *addr)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("sagactl: console: listen on %s: %w", *addr, err)
	}
	hs := &http.Server{
		Handler:           srv.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	if !app.Loopback(ln.Addr().String()) && srv.token == "" {
		// A host name that resolved beyond loopback: refuse, as for an address.
		ln.Close()
		return fmt.Errorf("%w: the console listens on %s, beyond loopback: set an access token (-token or CONSOLE_TOKEN)", errUsage, ln.Addr())
	}
	tracked := ""
	if srv.tr != nil {
		tracked = ", saga tracker " + *trackerTable
	}
	fmt.Fprintf(std.out, "sagactl console: serving http://%s/ (order API %s, brokers %s%s)\n", ln.Addr(), redactURL(c.orderURL), c.brokers, tracked)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("sagactl: console: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("sagactl: console: shutdown: %w", err)
	}
	return nil
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// isLoopback reports whether host (no port) is this machine only (app.Loopback).
func isLoopback(host string) bool { return app.Loopback(net.JoinHostPort(host, "0")) }

// console is the web console's server: clients of the order API, the brokers and the
// services' metrics, and the secret of its CSRF tokens. Nothing else: every page reads
// its data when it is requested.
type console struct {
	conn    conn
	api     *orderAPI
	targets []metricsTarget
	metrics *http.Client
	secret  []byte // per process: CSRF tokens do not outlive it
	now     func() time.Time
	token   string // required of every request when set (-token)
	// metricsToken is the bearer token of the services' /metrics (-metrics-token,
	// ADMIN_TOKEN); none when empty.
	metricsToken string
	hosts        map[string]bool  // host names answered besides loopback names and IPs (-hosts)
	tr           *tracker.Tracker // the saga tracker's index (-tracker-db); nil without one
	jaeger       *jaegerClient    // Jaeger's query API (-jaeger-query); nil without one

	mu sync.Mutex
	k  *kafka // connected on first use, so the console starts while the broker is down
	// dlqMemo keeps the per-reason counts of each dead-letter topic with the end offsets
	// they were counted at: the overview re-reads a topic only when it grew.
	dlqMemo map[string]dlqCount
}

type dlqCount struct {
	ends   map[int32][2]int64
	counts []dlqReasonCount
}

func newConsole(c conn, targets []metricsTarget) (*console, error) {
	api, err := c.orderAPI()
	if err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("sagactl: console: secret: %w", err)
	}
	return &console{
		conn: c, api: api, targets: targets, secret: secret, now: time.Now,
		metrics: &http.Client{Timeout: c.timeout},
		dlqMemo: make(map[string]dlqCount), hosts: make(map[string]bool),
	}, nil
}

// kafka returns the connected client, dialling it on first use and after a failure.
func (s *console) kafka(ctx context.Context) (*kafka, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.k != nil {
		return s.k, nil
	}
	k, err := dialKafka(ctx, s.conn)
	if err != nil {
		return nil, err
	}
	s.k = k
	return k, nil
}

func (s *console) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.k != nil {
		s.k.close()
		s.k = nil
	}
}
