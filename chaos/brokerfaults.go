package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Fault kinds of the scenarios on an Apache Kafka cluster.
const (
	FaultBrokerKill    = "broker kill-9"
	FaultBrokerPause   = "broker pause"
	FaultBrokerRestart = "broker restart"
)

// brokerRejoin bounds how long a restarted or continued broker may take to be unfenced
// and back in the ISR of every partition it replicates.
const brokerRejoin = 3 * time.Minute

// Scenarios are the scenarios of `make chaos`, in order: those on devkafka, then those on
// a 3-node Apache Kafka cluster.
var Scenarios = slices.Concat(devkafkaScenarios, brokerScenarios)

// brokerScenarios are the scenarios on a 3-node Apache Kafka cluster (topics replicated
// on all three, min.insync.replicas 2, producers with acks=all).
var brokerScenarios = []Scenario{
	{
		Name: "broker-leader-kill",
		Doc: "on a 3-node Apache Kafka cluster: kill -9 of the broker that leads the most saga-topic partitions, " +
			"restarted after 5 s and waited for until it is back in the ISR of all its partitions; twice, a different broker the second time",
		ApacheNodes: 3,
		Faults: func(ctx context.Context, r *run, c Config) {
			var prev int32 = -1
			for range scaled(2, c) {
				sleep(ctx, loadDuration(c)/3)
				prev = r.brokerLeaderKill(ctx, 5*time.Second, prev)
			}
		},
	},
	{
		Name: "broker-pause",
		Doc: "on a 3-node Apache Kafka cluster: the broker that leads the most saga-topic partitions is stopped (SIGSTOP) for 18 s, " +
			"past broker.session.timeout.ms (9 s), then continued and waited for until it is back in the ISR of all its partitions",
		ApacheNodes: 3,
		Faults: func(ctx context.Context, r *run, c Config) {
			for range scaled(1, c) {
				sleep(ctx, loadDuration(c)/3)
				r.brokerPause(ctx, 18*time.Second)
			}
		},
	},
	{
		Name: "broker-roll",
		Doc: "on a 3-node Apache Kafka cluster: a rolling restart under load, each broker in turn stopped with SIGTERM (controlled shutdown), " +
			"started again once it exited, and waited for until it is back in the ISR of all its partitions before the next",
		ApacheNodes: 3,
		Faults: func(ctx context.Context, r *run, c Config) {
			sleep(ctx, loadDuration(c)/4)
			for i := range r.s.apache {
				r.brokerRestart(ctx, int32(i+1))
			}
		},
	},
}

// broker returns the process of node id.
func (s *System) broker(id int32) *proc {
	if id < 1 || int(id) > len(s.apache) {
		return nil
	}
	return s.apache[id-1]
}

// metadata is the cluster's metadata, each request bounded by 5 s (a paused broker
// does not answer), retried until ctx ends.
func (s *System) metadata(ctx context.Context, topics ...string) (kadm.Metadata, error) {
	for {
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := s.adm.Metadata(mctx, topics...)
		cancel()
		if err == nil {
			return m, nil
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return m, fmt.Errorf("chaos: metadata: %w", err)
		}
	}
}

// sagaLeader returns the broker that leads the most saga-topic partitions, other than
// avoid, with that count and the number of saga-topic partitions.
func (s *System) sagaLeader(ctx context.Context, avoid int32) (id int32, led, total int, err error) {
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := s.metadata(mctx, sagaTopics...)
	if err != nil {
		return 0, 0, 0, err
	}
	id, led, total = mostLeader(m, len(s.apache), avoid)
	return id, led, total, nil
}

// mostLeader returns the broker among 1..brokers, other than avoid, that leads the most
// partitions of m's topics (the lowest id on a tie), with that count and the number of
// partitions.
func mostLeader(m kadm.Metadata, brokers int, avoid int32) (id int32, led, total int) {
	counts := map[int32]int{}
	for _, t := range m.Topics {
		for _, p := range t.Partitions {
			total++
			if p.Leader >= 0 {
				counts[p.Leader]++
			}
		}
	}
	id, led = -1, -1
	for b := range int32(brokers) {
		if b+1 != avoid && counts[b+1] > led {
			id, led = b+1, counts[b+1]
		}
	}
	return id, led, total
}

// brokerInSync waits until broker id is listed (unfenced) and in the ISR of every
// partition it replicates, of every topic; it returns how long that took.
func (s *System) brokerInSync(ctx context.Context, id int32) (time.Duration, error) {
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, brokerRejoin)
	defer cancel()
	var (
		last string
		ok   bool
	)
	for {
		if p := s.broker(id); p != nil && !p.running() {
			return time.Since(start), fmt.Errorf("chaos: broker %d exited; last log lines:\n%s", id, p.tail(20))
		}
		mctx, mcancel := context.WithTimeout(rctx, 5*time.Second)
		m, err := s.adm.Metadata(mctx)
		mcancel()
		if err == nil {
			// Twice in a row: the answer may come from the broker itself, just continued,
			// before its metadata caught up.
			if last = outOfSync(m, id); last == "" && ok {
				return time.Since(start), nil
			}
			ok = last == ""
		} else {
			ok = false
			last = err.Error()
		}
		if !sleep(rctx, 250*time.Millisecond) {
			return time.Since(start), fmt.Errorf("chaos: broker %d not back in sync within %s: %s", id, brokerRejoin, last)
		}
	}
}

// outOfSync says why broker id is not yet fully back in m: "" when it is listed and in
// the ISR of every partition that has it as a replica.
func outOfSync(m kadm.Metadata, id int32) string {
	if !slices.ContainsFunc(m.Brokers, func(b kadm.BrokerDetail) bool { return b.NodeID == id }) {
		return fmt.Sprintf("broker %d not listed (fenced or down)", id)
	}
	out := 0
	for _, t := range m.Topics {
		for _, p := range t.Partitions {
			if slices.Contains(p.Replicas, id) && !slices.Contains(p.ISR, id) {
				out++
			}
		}
	}
	if out > 0 {
		return fmt.Sprintf("broker %d out of the ISR of %d partitions", id, out)
	}
	return ""
}

// brokerLeaderKill kills (SIGKILL) the broker that leads the most saga-topic partitions,
// other than avoid, starts it again after down and waits until it is back in the ISR of
// its partitions. It returns the broker's id.
func (r *run) brokerLeaderKill(ctx context.Context, down time.Duration, avoid int32) int32 {
	start := time.Now()
	bg := context.WithoutCancel(ctx) // a broker is never left dead
	id, led, total, err := r.s.sagaLeader(bg, avoid)
	target := fmt.Sprintf("broker %d", id)
	if err != nil {
		r.record(FaultBrokerKill, "leader", "", start, err)
		return avoid
	}
	p := r.s.broker(id)
	detail := fmt.Sprintf("leader of %d of %d saga partitions, down %s", led, total, down)
	if err := p.kill9(); err != nil {
		r.record(FaultBrokerKill, target, detail, start, err)
		return id
	}
	sleep(bg, down)
	took, err := r.s.startBroker(bg, id)
	detail += fmt.Sprintf(", started and back in the ISR after %.1f s", took.Seconds())
	r.record(FaultBrokerKill, target, detail, start, err)
	return id
}

// brokerPause stops (SIGSTOP) the broker that leads the most saga-topic partitions for
// pause, continues it (SIGCONT) and waits until it is back in the ISR of its partitions.
func (r *run) brokerPause(ctx context.Context, pause time.Duration) {
	start := time.Now()
	bg := context.WithoutCancel(ctx) // never leave it stopped
	id, led, total, err := r.s.sagaLeader(bg, -1)
	if err != nil {
		r.record(FaultBrokerPause, "leader", "", start, err)
		return
	}
	p := r.s.broker(id)
	target := fmt.Sprintf("broker %d", id)
	detail := fmt.Sprintf("leader of %d of %d saga partitions, SIGSTOP for %s", led, total, pause)
	if err := p.signal(syscall.SIGSTOP); err != nil {
		r.record(FaultBrokerPause, target, detail, start, err)
		return
	}
	sleep(bg, pause)
	err = p.signal(syscall.SIGCONT)
	if err == nil {
		var took time.Duration
		took, err = r.s.brokerInSync(bg, id)
		detail += fmt.Sprintf(", back in the ISR %.1f s after SIGCONT", took.Seconds())
	}
	r.record(FaultBrokerPause, target, detail, start, err)
}

// brokerRestart stops broker id with SIGTERM (a controlled shutdown: its leaderships
// move first), waits until it exited (SIGKILL after a minute), starts it again and
// waits until it is back in the ISR of its partitions.
func (r *run) brokerRestart(ctx context.Context, id int32) {
	start := time.Now()
	bg := context.WithoutCancel(ctx)
	p := r.s.broker(id)
	target := fmt.Sprintf("broker %d", id)
	err := p.signal(syscall.SIGTERM)
	if err != nil {
		r.record(FaultBrokerRestart, target, "", start, err)
		return
	}
	var detail string
	if exited := p.waitExit(time.Minute); exited {
		detail = fmt.Sprintf("SIGTERM, exited after %.1f s", time.Since(start).Seconds())
	} else {
		err = errors.New("chaos: no exit within a minute of SIGTERM; killed")
		_ = p.kill9()
	}
	took, serr := r.s.startBroker(bg, id)
	detail += fmt.Sprintf(", started and back in the ISR after %.1f s", took.Seconds())
	r.record(FaultBrokerRestart, target, detail, start, errors.Join(err, serr))
}

// startBroker starts broker id again and waits until this run logged that its broker
// started (which it does once unfenced) and it is back in the ISR of every partition it
// replicates; it returns how long that took.
func (s *System) startBroker(ctx context.Context, id int32) (time.Duration, error) {
	start := time.Now()
	p := s.broker(id)
	log := filepath.Join(s.dir, "apache", "node-"+strconv.Itoa(int(id)), "server.log")
	before := countIn(log, apacheStarted)
	if err := p.start(); err != nil {
		return 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, brokerRejoin)
	defer cancel()
	for countIn(log, apacheStarted) <= before {
		if !p.running() {
			return time.Since(start), fmt.Errorf("chaos: broker %d exited while starting; last log lines:\n%s", id, p.tail(20))
		}
		if !sleep(rctx, 200*time.Millisecond) {
			return time.Since(start), fmt.Errorf("chaos: broker %d did not start within %s", id, brokerRejoin)
		}
	}
	_, err := s.brokerInSync(ctx, id)
	return time.Since(start), err
}

// apacheStarted is what a node logs once its broker is started and unfenced.
const apacheStarted = "Kafka Server started"

// countIn counts the lines of file that contain sub (0 if it cannot be read).
func countIn(file, sub string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), sub)
}

// waitExit waits until the current run of p exited, at most d; it reports whether it did.
func (p *proc) waitExit(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
