package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/internal/testenv"
)

const devSecret = "dev-S3cret"

func pingWith(t *testing.T, addr string, s app.KafkaSecurity) error {
	t.Helper()
	opts, err := s.Options()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(addr))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return cl.Ping(ctx)
}

// TestSecurityFlags builds a broker from -sasl and -tls-* flags, in process: it accepts
// each configured user over mutual TLS with a CA generated for the test, and refuses a
// wrong password, an unknown user, a client without certificate and a plaintext client.
func TestSecurityFlags(t *testing.T) {
	f := testenv.TestTLS(t)
	pwFile := passwordFile(t, "# users\norder:"+devSecret+"\n\nops:"+devSecret+"2\n")
	cfg, err := parseFlags([]string{"-port", "0", "-data-dir", "", "-sasl", "scram-sha-256:order", "-sasl", "PLAIN:ops",
		"-sasl-password-file", pwFile, "-tls-cert", f.ServerCertFile, "-tls-key", f.ServerKeyFile, "-tls-client-ca", f.CAFile}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.security.describe(); strings.Contains(d, devSecret) || !strings.Contains(d, "SCRAM-SHA-256:order") || !strings.Contains(d, "mutual TLS") {
		t.Errorf("describe = %q", d)
	}
	b, err := startBroker(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	c := b.c
	created, err := seedTopics(c, 2, []string{"orders.events", "orders.events"})
	if err != nil || len(created) != 1 {
		t.Fatalf("seed: %v %v", created, err)
	}
	addr := c.ListenAddrs()[0]
	good := app.KafkaSecurity{SASLMechanism: "SCRAM-SHA-256", SASLUsername: "order", SASLPassword: devSecret,
		TLS: true, TLSCAFile: f.CAFile, TLSCertFile: f.ClientCertFile, TLSKeyFile: f.ClientKeyFile}
	if err := pingWith(t, addr, good); err != nil {
		t.Fatalf("right password refused: %v", err)
	}
	ops := good
	ops.SASLMechanism, ops.SASLUsername, ops.SASLPassword = "PLAIN", "ops", devSecret+"2"
	if err := pingWith(t, addr, ops); err != nil {
		t.Fatalf("second user refused: %v", err)
	}
	for name, s := range map[string]app.KafkaSecurity{
		"wrong password": func() app.KafkaSecurity { s := good; s.SASLPassword = "nope"; return s }(),
		"unknown user":   func() app.KafkaSecurity { s := good; s.SASLUsername = "mallory"; return s }(),
		"no client cert": func() app.KafkaSecurity { s := good; s.TLSCertFile, s.TLSKeyFile = "", ""; return s }(),
		"plaintext":      {SASLMechanism: "SCRAM-SHA-256", SASLUsername: "order", SASLPassword: devSecret},
	} {
		if err := pingWith(t, addr, s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}

	for _, bad := range [][]string{
		{"-sasl", "SCRAM-SHA-256:order:" + devSecret},
		{"-sasl", "order:" + devSecret},
		{"-sasl", "GSSAPI:order", "-sasl-password-file", pwFile},
		{"-sasl", "PLAIN:order"}, // no password anywhere
		{"-sasl", "PLAIN:order", "-sasl-password-file", passwordFile(t, "order:"+devSecret+"\nmallory:"+devSecret+"\n")},
		{"-sasl", "PLAIN:order", "-sasl-password-file", passwordFile(t, "order "+devSecret+"\n")},
		{"-sasl-password-file", pwFile},
		{"-tls-cert", f.ServerCertFile},
		{"-tls-client-ca", f.CAFile},
		{"-tls-cert", f.ServerCertFile, "-tls-key", f.ClientKeyFile},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		} else if strings.Contains(err.Error(), devSecret) {
			t.Errorf("%q: error shows the password: %v", bad, err)
		}
	}
}

// passwordFile writes content to a file readable by its owner only and returns its path.
func passwordFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sasl-passwords")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A -sasl value with a password is refused without quoting it, and so is a password file
// other users can read.
func TestPasswordOnlyFromFileOrEnvironment(t *testing.T) {
	_, err := parseFlags([]string{"-sasl", "SCRAM-SHA-256:order:" + devSecret}, io.Discard)
	if !errors.Is(err, ErrPasswordInArgs) || strings.Contains(err.Error(), devSecret) ||
		!strings.Contains(err.Error(), "-sasl-password-file") || !strings.Contains(err.Error(), EnvSASLPassword) {
		t.Errorf("a password in -sasl: %v", err)
	}
	wide := passwordFile(t, "order:"+devSecret+"\n")
	if err := os.Chmod(wide, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = parseFlags([]string{"-sasl", "SCRAM-SHA-256:order", "-sasl-password-file", wide}, io.Discard)
	if err == nil || strings.Contains(err.Error(), devSecret) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a password file readable by others: %v", err)
	}
	// The environment covers users the file does not name.
	t.Setenv(EnvSASLPassword, devSecret+"-env")
	cfg, err := parseFlags([]string{"-sasl", "SCRAM-SHA-256:order", "-sasl", "PLAIN:ops",
		"-sasl-password-file", passwordFile(t, "ops:"+devSecret+"\n")}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, u := range cfg.security.users {
		got[u.user] = u.pass
	}
	if got["order"] != devSecret+"-env" || got["ops"] != devSecret {
		t.Errorf("passwords by user: %q", got)
	}
}

// TestSecureBinary runs the devkafka binary with SCRAM over TLS and -topics, its password
// in the environment: it seeds the topics without client credentials of its own, logs no
// password, shows none in its command line, and serves a client with the right settings.
// Its data directory is its user's alone, and so is every file in it, sasl.json included.
func TestSecureBinary(t *testing.T) {
	f := testenv.TestTLS(t)
	bin := buildDevkafka(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dataDir, 0o755); err != nil { // made private at start
		t.Fatal(err)
	}
	t.Setenv(EnvSASLPassword, devSecret)
	p := start(t, bin, "-port", "0", "-data-dir", dataDir, "-topics", "payments.events",
		"-sasl", "SCRAM-SHA-512:payment", "-tls-cert", f.ServerCertFile, "-tls-key", f.ServerKeyFile)
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cmdline), "SCRAM-SHA-512:payment") || strings.Contains(string(cmdline), devSecret) {
		t.Errorf("command line %q: want the user, not the password", cmdline)
	}
	s := app.KafkaSecurity{SASLMechanism: "SCRAM-SHA-512", SASLUsername: "payment", SASLPassword: devSecret,
		TLS: true, TLSCAFile: f.CAFile}
	opts, err := s.Options()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(p.addr))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics, err := kadm.NewClient(cl).ListTopics(ctx, "payments.events")
	if err != nil || !topics.Has("payments.events") {
		t.Fatalf("seeded topic missing: %v %v", topics, err)
	}
	s.SASLPassword = "wrong"
	if err := pingWith(t, p.addr, s); err == nil {
		t.Error("wrong password accepted")
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit %d", code)
	}
	if out := p.output(); strings.Contains(out, devSecret) || !strings.Contains(out, "SCRAM-SHA-512:payment") {
		t.Errorf("log shows the password or not the user:\n%s", out)
	}
	sawSASL := false
	err = filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", path, fi.Mode().Perm(), want)
		}
		sawSASL = sawSASL || d.Name() == "sasl.json"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !sawSASL {
		t.Error("no sasl.json in the data directory after shutdown")
	}
}

// lockedBuffer is a log destination safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestGuardOverTLSAndSASL runs the dead-member guard (internal/devbroker) on a broker
// that requires SCRAM-SHA-256 over mutual TLS: it reads the group requests of a member
// that joined over TLS, and when the member's process dies (its sockets closed, no
// LeaveGroup) it removes the member with a LeaveGroup of its own client, which
// authenticates with a -sasl user and needs no client certificate. The proof is the
// guard's log line naming the member and the group left without it, long before the
// member's session timeout (5 minutes) would have removed it.
func TestGuardOverTLSAndSASL(t *testing.T) {
	const (
		topic = "orders.events"
		group = "order-service"
	)
	f := testenv.TestTLS(t)
	cfg, err := parseFlags([]string{"-port", "0", "-data-dir", "", "-member-grace", "500ms", "-log-level", "none",
		"-sasl", "SCRAM-SHA-256:order", "-sasl-password-file", passwordFile(t, "order:"+devSecret),
		"-tls-cert", f.ServerCertFile, "-tls-key", f.ServerKeyFile, "-tls-client-ca", f.CAFile}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	b, err := startBroker(cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	if _, err := seedTopics(b.c, 2, []string{topic}); err != nil {
		t.Fatal(err)
	}

	roots := x509.NewCertPool()
	roots.AddCert(f.CA)
	clientCert, err := tls.LoadX509KeyPair(f.ClientCertFile, f.ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	tcfg := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12}
	d := &cuttable{}
	dialTLS := func(ctx context.Context, network, host string) (net.Conn, error) {
		raw, err := d.dial(ctx, network, host)
		if err != nil {
			return nil, err
		}
		c := tcfg.Clone()
		c.ServerName, _, _ = net.SplitHostPort(host)
		return tls.Client(raw, c), nil
	}
	member := groupMember(t, b.addr(), group, topic, "victim", kgo.RangeBalancer(),
		kgo.Dialer(dialTLS), kgo.SASL(scram.Auth{User: "order", Pass: devSecret}.AsSha256Mechanism()),
		kgo.SessionTimeout(5*time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			if fs := member.PollFetches(ctx); fs.IsClientClosed() {
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-polled; member.Close() })

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 60s; group: %s; broker log:\n%s", what, describeGroup(b.c, group), logs.String())
			}
		}
	}
	waitFor("the member holding both partitions over TLS", func() bool {
		as, _, state := assignment(b.c, group)
		return state == "Stable" && len(as["victim"]) == 2
	})
	d.cut()
	waitFor("the guard removing the dead member", func() bool {
		gi := b.c.GroupInfo(group)
		return strings.Contains(logs.String(), "removed a group member") && gi != nil && len(gi.Members) == 0
	})
	if out := logs.String(); strings.Contains(out, "could not remove") || strings.Contains(out, devSecret) {
		t.Errorf("broker log:\n%s", out)
	}
}
