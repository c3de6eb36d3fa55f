package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/choreo-saga/choreo/internal/devbroker"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	os.Exit(run(os.Args[1:], os.Stderr, sigs))
}

// config is the parsed command line.
type config struct {
	port       int
	advertise  string
	dataDir    string
	partitions int
	topics     []string
	autoCreate bool
	sync       bool
	logLevel   kfake.LogLevel
	grace      time.Duration
	security   security // -sasl, -tls-*: security.go
}

// defaultDataDir is where state lives unless -data-dir says otherwise: the user's cache
// directory (e.g. ~/.cache/choreo-devkafka), or the temporary directory without one.
func defaultDataDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "choreo-devkafka")
}

// ErrDataDir is returned for a data directory devkafka cannot keep private.
var ErrDataDir = errors.New("devkafka: data directory")

// privateDataDir creates dir (mode 0700) or makes an existing one 0700, and refuses one
// that is not a directory or belongs to another user: the directory holds the SASL
// users' credentials (sasl.json) besides the records.
func privateDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrDataDir, dir)
	}
	if uid, foreign := foreignOwner(fi); foreign {
		return fmt.Errorf("%w: %s belongs to uid %d, not to this user", ErrDataDir, dir, uid)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("%w: %w", ErrDataDir, err)
		}
	}
	// Written by an earlier run with a wider mode: kfake rewrites it at shutdown.
	if err := os.Chmod(filepath.Join(dir, "sasl.json"), 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	return nil
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var (
		cfg      config
		topics   string
		logLevel string
	)
	fs := flag.NewFlagSet("devkafka", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.port, "port", 9092, "listen `port` on 127.0.0.1 (0 picks a free port)")
	fs.StringVar(&cfg.advertise, "advertise", "", "advertise `host:port` to clients as the broker's address (e.g. a proxy in front of it; default: the address listened on)")
	fs.StringVar(&cfg.dataDir, "data-dir", defaultDataDir(), "persistence `directory`, made private to this user (mode 0700; empty: in memory only)")
	fs.IntVar(&cfg.partitions, "partitions", 6, "partitions of seeded and auto-created topics")
	fs.StringVar(&topics, "topics", "", "comma-separated `topics` to create at start if missing")
	fs.BoolVar(&cfg.autoCreate, "auto-create", true, "allow clients to auto-create topics")
	fs.BoolVar(&cfg.sync, "sync", false, "fsync every produced batch")
	fs.DurationVar(&cfg.grace, "member-grace", devbroker.DefaultGrace,
		"remove a consumer-group member this long after all its connections closed (static members: at least their session timeout)")
	fs.StringVar(&logLevel, "log-level", "warn", "broker-internal log `level`: none, error, warn, info, debug")
	secFlags := addSecurityFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: devkafka [flags]\n\nA Kafka-protocol broker for local runs (kfake), persisted to -data-dir.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	var err error
	if cfg.security, err = secFlags.build(); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if cfg.advertise != "" {
		if err := devbroker.CheckAdvertise(cfg.advertise); err != nil {
			return cfg, fmt.Errorf("-advertise: %w", err)
		}
	}
	if cfg.port < 0 || cfg.port > 65535 {
		return cfg, fmt.Errorf("-port %d out of range", cfg.port)
	}
	if cfg.grace <= 0 {
		return cfg, fmt.Errorf("-member-grace must be positive, got %s", cfg.grace)
	}
	if cfg.partitions < 1 {
		return cfg, fmt.Errorf("-partitions must be at least 1, got %d", cfg.partitions)
	}
	for _, t := range strings.Split(topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.topics = append(cfg.topics, t)
		}
	}
	switch strings.ToLower(logLevel) {
	case "none":
		cfg.logLevel = kfake.LogLevelNone
	case "error":
		cfg.logLevel = kfake.LogLevelError
	case "warn":
		cfg.logLevel = kfake.LogLevelWarn
	case "info":
		cfg.logLevel = kfake.LogLevelInfo
	case "debug":
		cfg.logLevel = kfake.LogLevelDebug
	default:
		return cfg, fmt.Errorf("-log-level %q: want none, error, warn, info or debug", logLevel)
	}
	return cfg, nil
}

func run(args []string, stderr io.Writer, sigs <-chan os.Signal) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "devkafka: %v\n", err)
		return exitUsage
	}
	hlevel := slog.LevelInfo
	if cfg.logLevel == kfake.LogLevelDebug {
		hlevel = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: hlevel}))
	// Every file devkafka writes (records, offsets, sasl.json) is its user's alone.
	restrictUmask()

	loaded := false
	if cfg.dataDir != "" {
		_, statErr := os.Stat(filepath.Join(cfg.dataDir, "meta.json"))
		loaded = statErr == nil
	}
	b, err := startBroker(cfg, log)
	if err != nil {
		log.Error("devkafka: start", "err", err, "port", cfg.port, "data_dir", cfg.dataDir)
		return exitError
	}

	if len(cfg.topics) > 0 {
		created, err := seedTopics(b.c, cfg.partitions, cfg.topics)
		if err != nil {
			log.Error("devkafka: seed topics", "err", err)
			b.close()
			return exitError
		}
		if len(created) > 0 {
			log.Info("topics created", "topics", strings.Join(created, ","), "partitions", cfg.partitions)
		}
	}
	persist := "memory only"
	if cfg.dataDir != "" {
		persist = cfg.dataDir
	}
	log.Info("devkafka listening", "addr", b.addr(), "advertised", b.advertised(), "data_dir", persist, "state_loaded", loaded,
		"auto_create", cfg.autoCreate, "partitions", cfg.partitions, "security", cfg.security.describe())

	sig := <-sigs
	log.Info("shutting down, persisting state (signal again to force)", "signal", sig.String())
	done := make(chan struct{})
	go func() {
		b.close()
		close(done)
	}()
	select {
	case <-done:
		log.Info("devkafka stopped")
		return exitOK
	case sig := <-sigs:
		log.Error("forced shutdown; state may be incomplete", "signal", sig.String())
		return exitError
	}
}

// broker is the running kfake cluster and the guard that removes group members whose
// process is gone (see internal/devbroker).
type broker struct {
	c     *kfake.Cluster
	guard *devbroker.Guard
}

// startBroker starts the cluster cfg describes; log receives kfake's own logs and the
// guard's removals.
func startBroker(cfg config, log *slog.Logger) (*broker, error) {
	grace := cfg.grace
	if grace <= 0 {
		grace = devbroker.DefaultGrace
	}
	if cfg.dataDir != "" {
		if err := privateDataDir(cfg.dataDir); err != nil {
			return nil, err
		}
	}
	gopts := []devbroker.Option{devbroker.WithGrace(grace), devbroker.WithLogger(log),
		devbroker.WithClientOptions(cfg.security.guardClient()...)}
	if cfg.advertise != "" {
		gopts = append(gopts, devbroker.WithAdvertise(cfg.advertise))
	}
	if cfg.security.tls != nil {
		// Below the guard's reading of requests: kfake.TLS would wrap its listener.
		gopts = append(gopts, devbroker.WithTLS(cfg.security.tls))
	}
	guard, err := devbroker.New(gopts...)
	if err != nil {
		return nil, err
	}
	opts := []kfake.Opt{
		kfake.ListenFn(guard.Listen),
		kfake.Ports(cfg.port),
		kfake.DefaultNumPartitions(cfg.partitions),
		kfake.WithLogger(slogLogger{log: log, level: cfg.logLevel}),
	}
	if cfg.autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	opts = append(opts, cfg.security.kfake...) // -sasl, -tls-*: security.go
	if cfg.dataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.dataDir))
		if cfg.sync {
			opts = append(opts, kfake.SyncWrites())
		}
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, err
	}
	if err := guard.Start(c); err != nil {
		c.Close()
		return nil, err
	}
	return &broker{c: c, guard: guard}, nil
}

// addr is the address the broker listens on.
func (b *broker) addr() string { return b.guard.ListenAddrs()[0] }

// advertised is the address the broker gives clients in metadata (-advertise, or addr).
func (b *broker) advertised() string { return b.c.ListenAddrs()[0] }

// close stops the broker and persists its state.
func (b *broker) close() {
	b.guard.Close()
	b.c.Close()
}

// seedTopics creates the topics that do not exist yet through the cluster itself (not
// through a client: the broker may require credentials or advertise a proxy's address)
// and returns their names.
func seedTopics(c *kfake.Cluster, partitions int, topics []string) ([]string, error) {
	var created []string
	for _, t := range topics {
		err := c.CreateTopic(t, int32(partitions), nil)
		switch {
		case err == nil:
			created = append(created, t)
		case errors.Is(err, kerr.TopicAlreadyExists):
		default:
			return created, fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	return created, nil
}

// slogLogger routes kfake's internal logs to slog at or above level.
type slogLogger struct {
	log   *slog.Logger
	level kfake.LogLevel
}

func (l slogLogger) Logf(level kfake.LogLevel, format string, args ...any) {
	if level == kfake.LogLevelNone || level > l.level {
		return
	}
	sl := slog.LevelInfo
	switch level {
	case kfake.LogLevelError:
		sl = slog.LevelError
	case kfake.LogLevelWarn:
		sl = slog.LevelWarn
	case kfake.LogLevelDebug:
		sl = slog.LevelDebug
	}
	l.log.Log(context.Background(), sl, "kfake: "+fmt.Sprintf(format, args...))
}
