package rebalance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/internal/testenv"
)

const (
	partitions = 12
	// perPartition is the interval between two records of one partition (50 records/s).
	perPartition = 20 * time.Millisecond
	// quiet is how long a group's assignment must stay unchanged, with every partition
	// consumed since its last change, to count as settled.
	quiet = 3 * time.Second
	// settleTimeout bounds one change: longer than any session time-out involved.
	settleTimeout = 2 * time.Minute
	// The kit's group time-outs (KAFKA_SESSION_TIMEOUT and KAFKA_REBALANCE_TIMEOUT at their defaults, see go doc ../../app).
	sessionTimeout   = 15 * time.Second
	rebalanceTimeout = 30 * time.Second
)

// protocol is one way of running a consumer group.
type protocol struct {
	name   string
	static bool // members have a group.instance.id
	opts   []kgo.Opt
}

var protocols = []protocol{
	{name: "classic, range (eager)", opts: []kgo.Opt{kgo.Balancers(kgo.RangeBalancer())}},
	{name: "classic, cooperative-sticky", opts: []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer())}},
	{name: "classic, cooperative-sticky, static", static: true, opts: []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer())}},
	{name: "KIP-848 consumer", opts: []kgo.Opt{kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer())}},
	{name: "KIP-848 consumer, static", static: true, opts: []kgo.Opt{kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer())}},
}

// change is one event in a group's life and what it cost.
type change struct {
	what    string
	stall   time.Duration // the longest time a partition went unconsumed around it
	settled time.Duration // from the change to the last assignment change it caused
	dups    int           // records delivered again
}

// BenchmarkGroupProtocols runs the script once per protocol (whatever b.N is) and
// reports the table; it fails when a partition is owned twice or not consumed again.
func BenchmarkGroupProtocols(b *testing.B) {
	brokers := testenv.Kafka(b)
	results := map[string][]change{}
	for _, p := range protocols {
		results[p.name] = runProtocol(b, brokers, p)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%-38s %-8s %10s %10s %6s\n", "PROTOCOL", "CHANGE", "STALL", "SETTLED", "DUPS")
	for _, p := range protocols {
		for _, c := range results[p.name] {
			fmt.Fprintf(&out, "%-38s %-8s %10s %10s %6d\n", p.name, c.what, c.stall.Round(time.Millisecond), c.settled.Round(time.Millisecond), c.dups)
		}
	}
	fmt.Print(out.String())
}

func runProtocol(t testing.TB, brokers []string, p protocol) []change {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	topic := testenv.Topic(t, brokers, partitions)
	group := testenv.Name(t, "group")
	rec := newRecorder()

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var produced sync.WaitGroup
	produced.Add(1)
	go func() {
		defer produced.Done()
		tick := time.NewTicker(perPartition)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for part := range int32(partitions) {
				prod.Produce(ctx, &kgo.Record{Topic: topic, Partition: part, Value: []byte("x")}, nil)
			}
		}
	}()
	defer produced.Wait()
	defer cancel()

	start := func(name string) *member {
		m, err := startMember(ctx, brokers, topic, group, name, p, rec)
		if err != nil {
			t.Fatalf("%s, %s: %v", p.name, name, err)
		}
		return m
	}
	a, b := start("a"), start("b")
	if _, err := rec.settle(ctx, time.Now(), []string{"a", "b"}, "b"); err != nil {
		t.Fatalf("%s: two members never settled: %v", p.name, err)
	}

	var out []change
	step := func(what string, live []string, must string, act func()) {
		dups := rec.duplicates()
		t0 := time.Now()
		act()
		settledAt, err := rec.settle(ctx, t0, live, must)
		if err != nil {
			t.Fatalf("%s, %s: %v", p.name, what, err)
		}
		stall, err := rec.stall(t0, settledAt)
		if err != nil {
			t.Fatalf("%s, %s: %v", p.name, what, err)
		}
		c := change{what: what, stall: stall, settled: rec.lastChange().Sub(t0), dups: rec.duplicates() - dups}
		if c.settled < 0 {
			c.settled = 0
		}
		out = append(out, c)
	}
	var c *member
	step("join", []string{"a", "b", "c"}, "c", func() { c = start("c") })
	step("leave", []string{"a", "c"}, "", func() { b.close(rec) })
	step("restart", []string{"a", "c"}, "a", func() { a.close(rec); a = start("a") })
	a.close(rec)
	c.close(rec)
	if o := rec.overlaps(); len(o) > 0 {
		t.Fatalf("%s: partitions owned by two members at once: %v", p.name, o)
	}
	return out
}

// member is one consumer of the group, polling until closed.
type member struct {
	name   string
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
}

func startMember(ctx context.Context, brokers []string, topic, group, name string, p protocol, rec *recorder) (*member, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(sessionTimeout),
		kgo.RebalanceTimeout(rebalanceTimeout),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { rec.assigned(name, m[topic]) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			_ = cl.CommitUncommittedOffsets(ctx) // the default revoke's commit, kept
			rec.revoked(name, m[topic])
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { rec.revoked(name, m[topic]) }),
	}
	if p.static {
		opts = append(opts, kgo.InstanceID(name))
	}
	cl, err := kgo.NewClient(append(opts, p.opts...)...)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	m := &member{name: name, cl: cl, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for pctx.Err() == nil {
			fs := cl.PollFetches(pctx)
			fs.EachRecord(func(r *kgo.Record) { rec.consumed(r.Partition, r.Offset) })
		}
	}()
	return m, nil
}

// close stops polling and closes the client; the member owns nothing after it.
func (m *member) close(rec *recorder) {
	m.cancel()
	<-m.done
	m.cl.Close()
	rec.gone(m.name)
}

// recorder keeps who owns which partition, when each partition was consumed, and how
// often each offset was delivered.
type recorder struct {
	mu      sync.Mutex
	owner   map[int32]string
	times   map[int32][]time.Time
	seen    map[int32]map[int64]int
	dups    int
	changed time.Time
	overlap []string
}

func newRecorder() *recorder {
	return &recorder{owner: map[int32]string{}, times: map[int32][]time.Time{}, seen: map[int32]map[int64]int{}}
}

func (r *recorder) assigned(name string, parts []int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range parts {
		if o := r.owner[p]; o != "" && o != name {
			r.overlap = append(r.overlap, fmt.Sprintf("partition %d to %s while %s owns it", p, name, o))
		}
		r.owner[p] = name
	}
	r.changed = time.Now()
}

func (r *recorder) revoked(name string, parts []int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range parts {
		if r.owner[p] == name {
			delete(r.owner, p)
		}
	}
	r.changed = time.Now()
}

func (r *recorder) gone(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, o := range r.owner {
		if o == name {
			delete(r.owner, p)
		}
	}
}

func (r *recorder) consumed(p int32, offset int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.times[p] = append(r.times[p], time.Now())
	if r.seen[p] == nil {
		r.seen[p] = map[int64]int{}
	}
	r.seen[p][offset]++
	if r.seen[p][offset] > 1 {
		r.dups++
	}
}

func (r *recorder) overlaps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.overlap)
}

func (r *recorder) duplicates() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dups
}

func (r *recorder) lastChange() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// settle waits until every partition is owned by one of live (must, if set, owning one),
// the assignment has not changed for quiet, and every partition has been consumed since
// both since and the last change; it returns that moment.
func (r *recorder) settle(ctx context.Context, since time.Time, live []string, must string) (time.Time, error) {
	deadline := time.Now().Add(settleTimeout)
	for time.Now().Before(deadline) {
		if ok, why := r.settled(since, live, must); ok {
			return time.Now(), nil
		} else if time.Now().Add(100 * time.Millisecond).After(deadline) {
			return time.Time{}, fmt.Errorf("not settled after %s: %s", settleTimeout, why)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return time.Time{}, fmt.Errorf("not settled after %s", settleTimeout)
}

func (r *recorder) settled(since time.Time, live []string, must string) (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.changed) < quiet {
		return false, "the assignment changed " + time.Since(r.changed).Round(time.Millisecond).String() + " ago"
	}
	from := since
	if r.changed.After(from) {
		from = r.changed
	}
	owns := false
	for p := range int32(partitions) {
		o := r.owner[p]
		if !slices.Contains(live, o) {
			return false, fmt.Sprintf("partition %d is owned by %q", p, o)
		}
		owns = owns || o == must
		ts := r.times[p]
		if len(ts) == 0 || ts[len(ts)-1].Before(from) {
			return false, fmt.Sprintf("partition %d not consumed since the change", p)
		}
	}
	if must != "" && !owns {
		return false, must + " owns no partition"
	}
	return true, ""
}

// stall is the longest time any partition went without a record consumed in [from, to],
// counting from its last record before from.
func (r *recorder) stall(from, to time.Time) (time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var worst time.Duration
	for p := range int32(partitions) {
		var prev time.Time
		for _, ts := range r.times[p] {
			if ts.After(to) {
				break
			}
			if !ts.Before(from) && !prev.IsZero() {
				worst = max(worst, ts.Sub(prev))
			}
			prev = ts
		}
		if prev.Before(from) {
			return 0, fmt.Errorf("partition %d not consumed between the change and settling", p)
		}
	}
	return worst, nil
}
