package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/internal/testenv/pgcluster"
)

// Where the figures come from: the server every run of the benchmark uses.
const (
	serverPrivate = "private cluster"
	serverShared  = "shared server (-pg)"
)

// pgServer is the Postgres server the benchmark creates its databases on.
type pgServer struct {
	url           string // a maintenance database allowed to CREATE DATABASE
	kind          string // serverPrivate or serverShared
	about         string // what the first line of the output says of it
	sharedBuffers string // SHOW shared_buffers on it
	cluster       *pgcluster.Cluster
}

// openServer returns the server the benchmark runs on. With -prefill and -shared-buffers
// that is a Postgres cluster of its own (pgcluster.Create: the version of the shared one,
// Debian's defaults but shared_buffers, on a free port), which close drops; otherwise
// -pg's server.
func openServer(ctx context.Context, c config) (*pgServer, error) {
	if !c.privateCluster() {
		s := &pgServer{url: c.pg, kind: serverShared}
		if err := s.describe(ctx); err != nil {
			return nil, err
		}
		return s, nil
	}
	want, err := pgBytes(c.sharedBuffers)
	if err != nil {
		return nil, err
	}
	if avail, ok := memAvailable(); ok {
		if err := checkRoom(want, avail); err != nil {
			return nil, fmt.Errorf("-shared-buffers %s: %w", c.sharedBuffers, err)
		}
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	cl, err := pgcluster.Create(ctx, clusterPrefix()+hex.EncodeToString(id[:]),
		pgcluster.WithSetting("shared_buffers", c.sharedBuffers))
	if err != nil {
		return nil, fmt.Errorf("a private Postgres cluster with shared_buffers %s (-shared-buffers '' runs on -pg's server instead): %w", c.sharedBuffers, err)
	}
	s := &pgServer{url: cl.URL(), kind: serverPrivate, cluster: cl}
	if err := s.describe(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// clusterPrefix begins the names of the clusters this process makes: with its pid, so
// that a test can tell them from those of another run on the machine.
func clusterPrefix() string { return fmt.Sprintf("bench_tracker_%d_", os.Getpid()) }

// privateCluster says whether the benchmark runs on a cluster of its own.
func (c config) privateCluster() bool { return c.prefill > 0 && c.sharedBuffers != "" }

// describe reads the server's shared_buffers and says which server it is.
func (s *pgServer) describe(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return fmt.Errorf("postgres (%s): %w", s.kind, err)
	}
	defer conn.Close(ctx) //nolint:errcheck
	var version string
	if err := conn.QueryRow(ctx, "SELECT current_setting('shared_buffers'), current_setting('server_version')").Scan(&s.sharedBuffers, &version); err != nil {
		return fmt.Errorf("postgres (%s): shared_buffers: %w", s.kind, err)
	}
	cfg := conn.Config()
	s.about = fmt.Sprintf("%s, Postgres %s on %s:%d, shared_buffers %s", s.kind, version, cfg.Host, cfg.Port, s.sharedBuffers)
	if s.cluster != nil {
		s.about = fmt.Sprintf("%s %s (Postgres %s, Debian's defaults but shared_buffers %s, on %s; dropped at the end)",
			s.kind, s.cluster.Name, version, s.sharedBuffers, s.cluster.Addr())
	}
	return nil
}

// close drops a private cluster: stopped at once (its data is thrown away, so a
// shutdown checkpoint of up to shared_buffers of dirty pages would only take time),
// then removed. It says so when the cluster is still there afterwards.
func (s *pgServer) close() {
	if s.cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = s.cluster.Ctl(ctx, "stop", "-m", "immediate")
	s.cluster.Drop()
	if _, err := os.Stat(filepath.Join(s.cluster.ConfigDir(), "postgresql.conf")); err == nil {
		fmt.Fprintf(os.Stderr, "bench/tracker: the private cluster is still there: pg_dropcluster --stop %s %s\n", s.cluster.Version, s.cluster.Name)
	}
	s.cluster = nil
}

// pgSize is a Postgres memory setting: a number, optionally with a unit (without one,
// 8 kB blocks, as shared_buffers counts).
var pgSize = regexp.MustCompile(`^\s*([0-9]+(?:\.[0-9]+)?)\s*(B|kB|MB|GB|TB)?\s*$`)

// pgBytes returns what the memory setting s (e.g. "2GB", "512MB", "16384") amounts to.
func pgBytes(s string) (int64, error) {
	m := pgSize.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("-shared-buffers %q: want a size as Postgres writes it, e.g. 2GB or 512MB", s)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("-shared-buffers %q: %w", s, err)
	}
	unit := map[string]float64{"": 8 << 10, "B": 1, "kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}[m[2]]
	b := v * unit
	if b <= 0 || b > 1<<50 {
		return 0, fmt.Errorf("-shared-buffers %q: out of range", s)
	}
	return int64(b), nil
}

// checkRoom refuses a buffer pool of more than half the memory available: the rest is
// for the shared server, this process and the page cache the prefill writes through.
func checkRoom(sharedBuffers, available int64) error {
	if sharedBuffers > available/2 {
		return fmt.Errorf("%.1f GiB is more than half the %.1f GiB of memory available", gib(sharedBuffers), gib(available))
	}
	return nil
}

func gib(b int64) float64 { return float64(b) / (1 << 30) }

// memAvailable is MemAvailable of /proc/meminfo, in bytes, if there is one.
func memAvailable() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	v, err := parseMemAvailable(string(b))
	return v, err == nil
}

// parseMemAvailable reads MemAvailable from the text of /proc/meminfo.
func parseMemAvailable(meminfo string) (int64, error) {
	for _, line := range strings.Split(meminfo, "\n") {
		fs := strings.Fields(line)
		if len(fs) == 3 && fs[0] == "MemAvailable:" && fs[2] == "kB" {
			kb, err := strconv.ParseInt(fs[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("meminfo: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("meminfo: no MemAvailable")
}
