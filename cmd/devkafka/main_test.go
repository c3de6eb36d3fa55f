package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/internal/devbroker"
)

// buildDevkafka compiles this command into a temporary directory.
func buildDevkafka(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go toolchain not on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "devkafka")
	out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proc is a running devkafka process.
type proc struct {
	cmd  *exec.Cmd
	addr string
	mu   sync.Mutex
	log  bytes.Buffer
	done chan error
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// start runs the binary and waits for its "listening" log line.
func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan error, 1)}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start devkafka: %v", err)
	}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if strings.Contains(line, "devkafka listening") {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						listening <- a
					}
				}
			}
		}
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
		}
	})
	select {
	case p.addr = <-listening:
		return p
	case err := <-p.done:
		t.Fatalf("devkafka exited before listening: %v\n%s", err, p.output())
	case <-time.After(2 * time.Minute):
		t.Fatalf("devkafka did not log its address\n%s", p.output())
	}
	return nil
}

// stop sends SIGTERM and returns the exit code.
func (p *proc) stop(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case err := <-p.done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
		return 0
	case <-time.After(2 * time.Minute):
		t.Fatalf("devkafka did not exit after SIGTERM\n%s", p.output())
	}
	return -1
}

type rec struct {
	key, value, header string
	partition          int32
	offset             int64
}

func fromRecord(r *kgo.Record) rec {
	out := rec{key: string(r.Key), value: string(r.Value), partition: r.Partition, offset: r.Offset}
	for _, h := range r.Headers {
		out.header += h.Key + "=" + string(h.Value) + ";"
	}
	return out
}

// readAll consumes n records of topic from the start, without a group.
func readAll(t *testing.T, addr, topic string, n int) map[string]rec {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	return poll(t, cl, n)
}

func poll(t *testing.T, cl *kgo.Client, n int) map[string]rec {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got := make(map[string]rec)
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", len(got), n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Key)] = fromRecord(r) })
	}
	if len(got) != n {
		t.Fatalf("consumed %d records, want %d", len(got), n)
	}
	return got
}

func TestDevkafkaPersistsAcrossRestart(t *testing.T) {
	bin := buildDevkafka(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	port := freePort(t)
	args := []string{"-port", strconv.Itoa(port), "-data-dir", dataDir, "-partitions", "2",
		"-topics", "seeded.a,seeded.b"}

	p := start(t, bin, args...)
	if want := fmt.Sprintf("127.0.0.1:%d", port); p.addr != want {
		t.Fatalf("listening on %s, want %s", p.addr, want)
	}
	if !strings.Contains(p.output(), "state_loaded=false") {
		t.Errorf("first start should report no loaded state:\n%s", p.output())
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(p.addr), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"seeded.a", "seeded.b"} {
		td, ok := topics[name]
		if !ok || len(td.Partitions) != 2 {
			t.Fatalf("seeded topic %s: present=%v partitions=%d, want 2", name, ok, len(td.Partitions))
		}
	}

	const n = 20
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{
			Topic:   "seeded.a",
			Key:     fmt.Appendf(nil, "k%02d", i),
			Value:   fmt.Appendf(nil, "v%02d", i),
			Headers: []kgo.RecordHeader{{Key: "ce_id", Value: fmt.Appendf(nil, "id-%d", i)}},
		})
	}
	// A topic nobody created: auto-creation is on by default.
	recs = append(recs, &kgo.Record{Topic: "auto.created", Key: []byte("only"), Value: []byte("one")})
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cl.Close()

	before := readAll(t, p.addr, "seeded.a", n)

	// A consumer group consumes everything and commits.
	group, err := kgo.NewClient(kgo.SeedBrokers(p.addr), kgo.ConsumeTopics("seeded.a"),
		kgo.ConsumerGroup("g1"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	poll(t, group, n)
	if err := group.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	group.Close()

	if code := p.stop(t); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0\n%s", code, p.output())
	}
	if _, err := os.Stat(filepath.Join(dataDir, "meta.json")); err != nil {
		t.Fatalf("no state written to the data dir: %v", err)
	}

	// Same data dir, same seeded topics (they exist already: no error).
	p = start(t, bin, args...)
	if !strings.Contains(p.output(), "state_loaded=true") {
		t.Errorf("restart should report loaded state:\n%s", p.output())
	}
	after := readAll(t, p.addr, "seeded.a", n)
	for k, want := range before {
		if got := after[k]; got != want {
			t.Errorf("record %s after restart = %+v, want %+v", k, got, want)
		}
	}
	if got := readAll(t, p.addr, "auto.created", 1)["only"]; got.value != "one" {
		t.Errorf("auto-created topic after restart: %+v", got)
	}

	// The group's committed offsets survived: it resumes after the 20 records.
	cl, err = kgo.NewClient(kgo.SeedBrokers(p.addr))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "seeded.a", Key: []byte("new"), Value: []byte("after restart")}).FirstErr(); err != nil {
		t.Fatalf("produce after restart: %v", err)
	}
	cl.Close()
	group, err = kgo.NewClient(kgo.SeedBrokers(p.addr), kgo.ConsumeTopics("seeded.a"),
		kgo.ConsumerGroup("g1"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	resumed := poll(t, group, 1)
	group.Close()
	if _, ok := resumed["new"]; !ok {
		t.Errorf("group g1 resumed with %v, want only the record produced after the restart", resumed)
	}

	if code := p.stop(t); code != 0 {
		t.Fatalf("second exit code = %d, want 0\n%s", code, p.output())
	}
}

func TestDevkafkaAutoCreateOff(t *testing.T) {
	bin := buildDevkafka(t)
	p := start(t, bin, "-port", "0", "-data-dir", "", "-auto-create=false", "-topics", "known")
	if !strings.Contains(p.output(), "data_dir=\"memory only\"") {
		t.Errorf("empty -data-dir should run in memory:\n%s", p.output())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.addr), kgo.AllowAutoTopicCreation(),
		kgo.RecordDeliveryTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "known", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("produce to seeded topic: %v", err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "unknown", Value: []byte("x")}).FirstErr(); err == nil {
		t.Fatal("produce to an unknown topic succeeded with -auto-create=false")
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit code = %d\n%s", code, p.output())
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    config
		wantErr bool
	}{
		{name: "defaults", args: nil, want: config{port: 9092, dataDir: defaultDataDir(), partitions: 6,
			autoCreate: true, logLevel: kfake.LogLevelWarn, grace: devbroker.DefaultGrace}},
		{name: "all", args: []string{"-port", "0", "-data-dir", "/x", "-partitions", "6",
			"-topics", " a, b,,c ", "-auto-create=false", "-sync", "-log-level", "DEBUG", "-member-grace", "1s"},
			want: config{port: 0, dataDir: "/x", partitions: 6, topics: []string{"a", "b", "c"},
				sync: true, logLevel: kfake.LogLevelDebug, grace: time.Second}},
		{name: "advertise", args: []string{"-advertise", "proxy.local:19092"}, want: config{port: 9092, advertise: "proxy.local:19092",
			dataDir: defaultDataDir(), partitions: 6, autoCreate: true, logLevel: kfake.LogLevelWarn, grace: devbroker.DefaultGrace}},
		{name: "advertise without port", args: []string{"-advertise", "proxy.local"}, wantErr: true},
		{name: "advertise port 0", args: []string{"-advertise", "127.0.0.1:0"}, wantErr: true},
		{name: "bad grace", args: []string{"-member-grace", "0s"}, wantErr: true},
		{name: "bad port", args: []string{"-port", "70000"}, wantErr: true},
		{name: "bad partitions", args: []string{"-partitions", "0"}, wantErr: true},
		{name: "bad level", args: []string{"-log-level", "loud"}, wantErr: true},
		{name: "stray arg", args: []string{"extra"}, wantErr: true},
		{name: "unknown flag", args: []string{"-nope"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFlags(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRunUsageExitCode(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"-partitions", "-1"}, &stderr, nil); code != exitUsage {
		t.Fatalf("exit code %d, want %d; stderr: %s", code, exitUsage, stderr.String())
	}
	if !strings.Contains(stderr.String(), "-partitions") {
		t.Errorf("usage error does not name the flag: %s", stderr.String())
	}
}

// A killed broker (no shutdown, no final save) keeps what it acknowledged on created
// topics: segments are written as records arrive and the topic list when topics are
// created, so only the OS page cache, not the process, has to survive.
func TestDevkafkaSurvivesKill(t *testing.T) {
	bin := buildDevkafka(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	args := []string{"-port", strconv.Itoa(freePort(t)), "-data-dir", dataDir, "-topics", "killed"}
	p := start(t, bin, args...)
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.addr), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := range n {
		r := &kgo.Record{Topic: "killed", Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	cl.Close()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done

	p = start(t, bin, args...)
	got := readAll(t, p.addr, "killed", n)
	for i := range n {
		if r := got[fmt.Sprintf("k%d", i)]; r.value != fmt.Sprintf("v%d", i) {
			t.Errorf("record k%d after SIGKILL: %+v", i, r)
		}
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit code %d\n%s", code, p.output())
	}
}
