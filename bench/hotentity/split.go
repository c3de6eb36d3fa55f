package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/choreo-saga/choreo/internal/procstat"
)

// childEnv names the environment variable that makes this program a child pipeline
// process: it holds the childSpec, as JSON.
const childEnv = "CHOREO_HOTENTITY_CHILD"

// childStopGrace bounds how long a child may take to stop once told to.
const childStopGrace = 30 * time.Second

func processesName(n int) string {
	if n == 1 {
		return "1 process"
	}
	return strconv.Itoa(n) + " processes"
}

// childSpec is what a child process needs to run its share of a mode's pipeline.
type childSpec struct {
	Index        int // this child's place among the mode's children (0: runs the hand-written relay)
	Hand         bool
	Batch        int
	AtCommit     bool
	DSN, Redis   string
	Brokers      []string
	In, Prefix   string
	Group, Out   string
	Partitions   int
	FetchMaxWait time.Duration
}

// childPipelines runs a mode's pipeline in spec.processes child processes of this
// program, members of one consumer group, each with its own Postgres pool and Redis
// client, as separate instances of a service would: the control for "is a second
// instance slower than one?", since the hand-written floor split the same way pays the
// same per-process costs. The hand-written relay runs in the first child only (it has no
// leader election); choreo's relays elect their leader and the outbox sends NOTIFYs
// (outbox.WithNotifier), as the services do. A child reports each relay round's acks and,
// as it exits, its transaction counts on its stdout; it stops when its stdin closes.
type childPipelines struct {
	b              *bench
	spec           modeSpec
	in, group, out string
	onAcked        func(n int)

	txs, records atomic.Int64
	mu           sync.Mutex
	pids         []int
}

func (c *childPipelines) counts() (int64, int64) { return c.txs.Load(), c.records.Load() }

// cpu is the CPU the running children have used so far.
func (c *childPipelines) cpu() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var sum time.Duration
	for _, pid := range c.pids {
		if d, err := procstat.CPU(pid); err == nil {
			sum += d
		}
	}
	return sum
}

func (c *childPipelines) run(ctx context.Context) error {
	errs := make(chan error, c.spec.processes)
	var (
		stdins []io.Closer
		err    error
	)
	for i := range c.spec.processes {
		var stdin io.Closer
		if stdin, err = c.start(i, errs); err != nil {
			break // the children already started are stopped below
		}
		stdins = append(stdins, stdin)
	}
	running := len(stdins)
	if err == nil {
		select {
		case <-ctx.Done():
		case err = <-errs: // a child ended before it was told to
			running--
			err = errors.Join(errors.New("a child pipeline process ended early"), err)
		}
	}
	for _, s := range stdins {
		s.Close()
	}
	timeout := time.After(childStopGrace)
	for range running {
		select {
		case cerr := <-errs:
			err = errors.Join(err, cerr)
		case <-timeout:
			c.kill()
			return errors.Join(err, fmt.Errorf("child pipelines still running %v after they were told to stop: killed", childStopGrace))
		}
	}
	return err
}

// start starts child i, which reports its end on errs, and returns its stdin: closing it
// tells the child to stop.
func (c *childPipelines) start(i int, errs chan<- error) (io.Closer, error) {
	spec, err := json.Marshal(childSpec{
		Index: i, Hand: c.spec.hand, Batch: c.spec.batch, AtCommit: c.spec.atCommit,
		DSN: c.b.dsn, Redis: c.b.c.redis, Brokers: c.b.brokers, In: c.in, Prefix: c.b.prefix,
		Group: c.group, Out: c.out, Partitions: c.b.c.partitions, FetchMaxWait: c.b.c.fetchMaxWait,
	})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("child %d: %w", i, err)
	}
	c.mu.Lock()
	c.pids = append(c.pids, cmd.Process.Pid)
	c.mu.Unlock()
	go func() {
		rerr := c.read(stdout)
		if werr := cmd.Wait(); werr != nil || rerr != nil {
			errs <- fmt.Errorf("child %d: %w", i, errors.Join(werr, rerr))
			return
		}
		errs <- nil
	}()
	return stdin, nil
}

func (c *childPipelines) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pid := range c.pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// read parses a child's reports until its stdout closes: "acked N" per relay round, and
// "txs T R" (transactions, records) as it exits.
func (c *childPipelines) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "acked":
			n, err := strconv.Atoi(f[1])
			if err != nil {
				return fmt.Errorf("bad report %q", sc.Text())
			}
			c.onAcked(n)
		case len(f) == 3 && f[0] == "txs":
			t, err1 := strconv.ParseInt(f[1], 10, 64)
			r, err2 := strconv.ParseInt(f[2], 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return fmt.Errorf("bad report %q", sc.Text())
			}
			c.txs.Add(t)
			c.records.Add(r)
		default:
			return fmt.Errorf("unexpected output %q", sc.Text())
		}
	}
	return sc.Err()
}

// runAsChild runs this process as a child pipeline process if childEnv is set (it exits
// with status 1 if the pipeline fails) and reports whether it did; the program's main and
// the tests' TestMain call it first.
func runAsChild() bool {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return false
	}
	if err := runChild(spec); err != nil {
		fmt.Fprintln(os.Stderr, "bench/hotentity child:", err)
		os.Exit(1)
	}
	return true
}

// runChild is a child process's main: it runs its share of the pipeline that spec (the
// value of childEnv) describes until its stdin closes.
func runChild(spec string) error {
	var s childSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		return fmt.Errorf("%s: %w", childEnv, err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	go func() { // the parent closes stdin to stop this child
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	b := &bench{
		c:       config{redis: s.Redis, partitions: s.Partitions, fetchMaxWait: s.FetchMaxWait},
		brokers: s.Brokers, prefix: s.Prefix, log: newLogger(),
	}
	// As in this process: one connection per partition (a member owns them all until the
	// others join), plus the relay's.
	pool, err := pgxpool.New(ctx, fmt.Sprintf("%s&pool_max_conns=%d", s.DSN, s.Partitions+4))
	if err != nil {
		return err
	}
	defer pool.Close()
	rdb := redis.NewClient(&redis.Options{Addr: s.Redis, PoolSize: 2 * s.Partitions})
	defer rdb.Close()

	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	mode := modeSpec{hand: s.Hand, batch: s.Batch, atCommit: s.AtCommit}
	p, counts := b.pipeline(mode, pipelineSite{
		in: s.In, group: s.Group, out: s.Out, pool: pool, rdb: rdb,
		relay: s.Index == 0, notify: true,
		onAcked: func(n int) { report("acked %d", n) },
	})
	err = p.run(ctx)
	txs, records := counts()
	report("txs %d %d", txs, records)
	return err
}
