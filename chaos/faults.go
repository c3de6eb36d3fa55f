package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/internal/testenv/faultproxy"
	"github.com/choreo-saga/choreo/internal/testenv/pgcluster"
	"github.com/choreo-saga/choreo/services/events"
)

// Fault is one fault the suite injected, for the report.
type Fault struct {
	// At is when it started, relative to the start of the scenario.
	At time.Duration `json:"at_ns"`
	// Took is how long it lasted (a kill: until the instance was restarted).
	Took   time.Duration `json:"took_ns"`
	Kind   string        `json:"kind"`
	Target string        `json:"target"`
	Detail string        `json:"detail,omitempty"`
	Err    string        `json:"error,omitempty"`
}

// Fault kinds.
const (
	FaultKill          = "kill-9"
	FaultKillLeader    = "kill-9 relay leader"
	FaultPostgres      = "postgres outage"
	FaultPostgresCrash = "postgres crash-restart"
	FaultRedis         = "redis outage"
	FaultKafka         = "devkafka kill-9"
	FaultDuplicate     = "duplicate delivery"
	FaultReplay        = "topic replay"
	FaultPoison        = "poison record"
	FaultPause         = "pause past lock TTL"
	FaultOverload      = "overload"
	FaultNetwork       = "network fault"
)

type kadmOffset = kadm.ListedOffset

// headers the suite puts on records it produces itself.
const (
	hdrPoison   = "chaos_poison"    // the poison kind
	hdrPoisonID = "chaos_poison_id" // unique per poison record
	hdrDup      = "chaos_dup"       // a duplicate the suite re-produced
)

// run is the state of one scenario run: the system, the seeded random source, and what
// was injected.
type run struct {
	s     *System
	rng   *rand.Rand
	start time.Time

	// cluster is the scenario's own Postgres cluster, nil on the shared one.
	cluster *pgcluster.Cluster

	mu        sync.Mutex
	faults    []Fault
	poison    []poisonRecord
	lastFault time.Time
	dups      int
	upgraded  time.Time // when the upgrade scenario's roll ended
}

func newRun(s *System, seed uint64) *run {
	return &run{s: s, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), start: time.Now()}
}

// intn is a locked draw from the run's random source.
func (r *run) intn(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.IntN(n)
}

// record notes a fault that started at start and ended now.
func (r *run) record(kind, target, detail string, start time.Time, err error) {
	f := Fault{At: start.Sub(r.start), Took: time.Since(start), Kind: kind, Target: target, Detail: detail}
	if err != nil {
		f.Err = err.Error()
	}
	r.mu.Lock()
	r.faults = append(r.faults, f)
	r.lastFault = time.Now()
	r.mu.Unlock()
	msg := fmt.Sprintf("fault %s %s %s (%.1fs)", kind, target, detail, f.Took.Seconds())
	if err != nil {
		msg += ": " + err.Error()
	}
	r.s.logf("%s", msg)
}

// sleep waits d or until ctx ends; it reports whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// KillInstance kills p with SIGKILL, waits down, and starts it again.
func (r *run) killInstance(ctx context.Context, p *proc, kind string, down time.Duration) {
	start := time.Now()
	err := p.kill9()
	if err == nil {
		sleep(ctx, down)
		// The restart is not bounded by ctx: an instance is never left dead.
		err = r.s.restart(context.WithoutCancel(ctx), p, 90*time.Second)
	}
	r.record(kind, p.name, fmt.Sprintf("down %s", down), start, err)
}

// killLoop kills a service instance every `every` (jittered ±50%) until it made kills
// kills or ctx ends. The services take turns, so each is killed kills/3 times; the
// instance is drawn at random among the running ones, except that every leaderEvery-th
// kill is the service's outbox relay leader (found through pg_locks). Each instance is
// restarted after down.
func (r *run) killLoop(ctx context.Context, kills int, every, down time.Duration, leaderEvery int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range kills {
		if !sleep(ctx, every/2+time.Duration(r.intn(int(every)+1))) {
			return
		}
		var (
			p    *proc
			kind = FaultKill
			svc  = services[i%len(services)]
		)
		if leaderEvery > 0 && (i+1)%leaderEvery == 0 {
			if l, err := r.s.relayLeader(ctx, svc); err == nil && l.running() {
				p, kind = l, FaultKillLeader
			} else {
				r.s.logf("relay leader of %s not found (%v); killing a random instance", svc, err)
			}
		}
		if p == nil {
			// A random running instance; keep at least one instance of each service alive
			// so that the system always makes progress: while the other instance is still
			// restarting, wait for it (bounded) rather than skip the kill.
			var cands []*proc
			for wait := time.Now(); ; {
				cands = slices.DeleteFunc(slices.Clone(r.s.instances[svc]), func(q *proc) bool { return !q.running() || !r.otherReady(ctx, q) })
				if len(cands) > 0 || time.Since(wait) > time.Minute || !sleep(ctx, 200*time.Millisecond) {
					break
				}
			}
			if len(cands) == 0 {
				r.record(FaultKill, svc, "skipped: no instance could be killed with another one ready", time.Now(),
					errors.New("chaos: no killable instance within a minute"))
				continue
			}
			p = cands[r.intn(len(cands))]
		}
		wg.Go(func() { r.killInstance(ctx, p, kind, down) })
	}
}

// otherReady reports whether another instance of p's service is running and ready.
func (r *run) otherReady(ctx context.Context, p *proc) bool {
	for _, svc := range services {
		if !slices.Contains(r.s.instances[svc], p) {
			continue
		}
		for _, q := range r.s.instances[svc] {
			if q != p && q.running() && r.s.ready(ctx, q) {
				return true
			}
		}
	}
	return false
}

// postgresOutage takes svc's database away for d: new connections are refused
// (ALLOW_CONNECTIONS false) and its sessions are terminated, repeatedly, until d passed.
func (r *run) postgresOutage(ctx context.Context, svc string, d time.Duration) {
	start := time.Now()
	db := pgx.Identifier{r.s.dbs[svc]}.Sanitize()
	// The outage must end even when ctx ends first.
	bg := context.WithoutCancel(ctx)
	_, err := r.s.admin.Exec(bg, "ALTER DATABASE "+db+" WITH ALLOW_CONNECTIONS false")
	terminated := 0
	if err == nil {
		for time.Since(start) < d {
			var n int
			if qerr := r.s.admin.QueryRow(bg, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = $1 AND pid <> pg_backend_pid()) t`, r.s.dbs[svc]).Scan(&n); qerr == nil {
				terminated += n
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	_, aerr := r.s.admin.Exec(bg, "ALTER DATABASE "+db+" WITH ALLOW_CONNECTIONS true")
	r.record(FaultPostgres, svc+" database", fmt.Sprintf("%s, %d sessions terminated", d, terminated), start, errors.Join(err, aerr))
}

// redisOutage stops the suite's Redis for d and starts it again, empty.
func (r *run) redisOutage(ctx context.Context, d time.Duration) {
	start := time.Now()
	err := r.s.redis.kill9()
	if err == nil {
		sleep(ctx, d)
		err = r.s.startRedis(context.WithoutCancel(ctx))
	}
	r.record(FaultRedis, "redis", fmt.Sprintf("down %s, restarted empty", d), start, err)
}

// kafkaRestart kills devkafka with SIGKILL and restarts it on its data dir after down.
func (r *run) kafkaRestart(ctx context.Context, down time.Duration) {
	start := time.Now()
	err := r.s.kafka.kill9()
	if err == nil {
		sleep(ctx, down)
		err = r.s.startKafka(context.WithoutCancel(ctx))
	}
	r.record(FaultKafka, "devkafka", fmt.Sprintf("down %s, restarted on its data dir", down), start, err)
}

// pauseHolder stops (SIGSTOP) a random payment or inventory instance while it handles
// events, for pause (longer than the lock TTL), then continues it (SIGCONT). Its locks
// expire meanwhile, another instance takes the partition and the entity over, and the
// stale writes of the paused one must be rejected when it wakes up.
func (r *run) pauseHolder(ctx context.Context, pause time.Duration) {
	cands := append(slices.Clone(r.s.instances["payment"]), r.s.instances["inventory"]...)
	p := cands[r.intn(len(cands))]
	start := time.Now()
	err := p.signal(syscall.SIGSTOP)
	if err == nil {
		sleep(context.WithoutCancel(ctx), pause) // never leave it stopped
		err = p.signal(syscall.SIGCONT)
	}
	r.record(FaultPause, p.name, fmt.Sprintf("SIGSTOP for %s", pause), start, err)
}

// sagaTopics are the topics the services exchange events on.
var sagaTopics = events.Topics

// duplicateLive re-produces every record that appears on the saga topics once more
// (same partition, key, value and headers, plus a chaos_dup header), until ctx ends: every
// event is delivered twice.
func (r *run) duplicateLive(ctx context.Context) {
	start := time.Now()
	ends, err := r.s.adm.ListEndOffsets(ctx, sagaTopics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		r.record(FaultDuplicate, "saga topics", "", start, err)
		return
	}
	from := map[string]map[int32]kgo.Offset{}
	ends.Each(func(o kadmOffset) {
		if from[o.Topic] == nil {
			from[o.Topic] = map[int32]kgo.Offset{}
		}
		from[o.Topic][o.Partition] = kgo.NewOffset().At(o.Offset)
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.s.seeds()...), kgo.ConsumePartitions(from), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.FetchMaxBytes(64<<20))
	if err != nil {
		r.record(FaultDuplicate, "saga topics", "", start, err)
		return
	}
	defer cl.Close()
	n := 0
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		var batch []*kgo.Record
		fs.EachRecord(func(rec *kgo.Record) {
			if header(rec, hdrDup) != "" || header(rec, hdrPoison) != "" {
				return
			}
			batch = append(batch, copyRecord(rec))
		})
		if len(batch) > 0 {
			// Produced with a context of its own, so the last fetch is duplicated too.
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			if err := r.s.kcl.ProduceSync(pctx, batch...).FirstErr(); err != nil {
				r.s.logf("duplicate: %v", err)
			}
			cancel()
			n += len(batch)
		}
	}
	r.mu.Lock()
	r.dups += n
	r.mu.Unlock()
	r.record(FaultDuplicate, "saga topics", fmt.Sprintf("%d records re-produced once each", n), start, nil)
}

// replayTopic re-produces every record of topic, from offset 0 to its current end.
func (r *run) replayTopic(ctx context.Context, topic string) {
	start := time.Now()
	recs, err := r.s.readTopic(ctx, topic)
	var batch []*kgo.Record
	for _, rec := range recs {
		if header(rec, hdrPoison) == "" {
			batch = append(batch, copyRecord(rec))
		}
	}
	if err == nil && len(batch) > 0 {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		err = r.s.kcl.ProduceSync(pctx, batch...).FirstErr()
		cancel()
	}
	r.mu.Lock()
	r.dups += len(batch)
	r.mu.Unlock()
	r.record(FaultReplay, topic, fmt.Sprintf("%d records re-produced from offset 0", len(batch)), start, err)
}

// copyRecord returns a copy of rec for re-producing it to the same partition, marked as
// a duplicate.
func copyRecord(rec *kgo.Record) *kgo.Record {
	hs := append(slices.Clone(rec.Headers), kgo.RecordHeader{Key: hdrDup, Value: []byte(strconv.FormatInt(rec.Offset, 10))})
	return &kgo.Record{Topic: rec.Topic, Partition: rec.Partition, Key: rec.Key, Value: rec.Value, Headers: hs}
}

// header returns the value of rec's last header named key ("" if none).
func header(rec *kgo.Record, key string) string {
	for i := len(rec.Headers) - 1; i >= 0; i-- {
		if rec.Headers[i].Key == key {
			return string(rec.Headers[i].Value)
		}
	}
	return ""
}

// readTopic reads every record of topic from its start to the end offsets listed
// first (bounded by two minutes).
func (s *System) readTopic(ctx context.Context, topic string) ([]*kgo.Record, error) {
	starts, err := s.adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("chaos: start offsets of %s: %w", topic, err)
	}
	ends, err := s.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("chaos: end offsets of %s: %w", topic, err)
	}
	from := map[int32]kgo.Offset{}
	pending := map[int32]int64{}
	starts.Each(func(o kadmOffset) {
		end, _ := ends.Lookup(topic, o.Partition)
		if o.Offset < end.Offset {
			from[o.Partition] = kgo.NewOffset().At(o.Offset)
			pending[o.Partition] = end.Offset
		}
	})
	if len(from) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.seeds()...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(32<<20), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("chaos: kafka client: %w", err)
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var out []*kgo.Record
	for len(pending) > 0 {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			return out, fmt.Errorf("chaos: read %s: %w (partitions left %v)", topic, rctx.Err(), pending)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			end, ok := pending[rec.Partition]
			if !ok || rec.Offset >= end {
				return
			}
			out = append(out, rec)
			if rec.Offset+1 >= end {
				delete(pending, rec.Partition)
			}
		})
	}
	return out, nil
}

// netFault applies f to the proxies on path for d, then clears it; what names the fault
// in the report.
func (r *run) netFault(ctx context.Context, path NetPath, what string, f faultproxy.Faults, d time.Duration) {
	start := time.Now()
	pxs := r.s.proxies(path)
	if len(pxs) == 0 {
		r.record(FaultNetwork, string(path), what, start, errNoProxies)
		return
	}
	for _, px := range pxs {
		px.Set(f)
	}
	sleep(ctx, d)
	for _, px := range pxs {
		px.Clear()
	}
	r.record(FaultNetwork, string(path), fmt.Sprintf("%s for %s", what, d), start, nil)
}

// netReset resets every connection through the proxies on path once.
func (r *run) netReset(ctx context.Context, path NetPath) {
	start := time.Now()
	pxs := r.s.proxies(path)
	if len(pxs) == 0 {
		r.record(FaultNetwork, string(path), "reset", start, errNoProxies)
		return
	}
	for _, px := range pxs {
		px.Reset()
	}
	r.record(FaultNetwork, string(path), "every connection reset", start, nil)
}

// netResets resets every connection on path n times, 1 s apart.
func (r *run) netResets(ctx context.Context, path NetPath, n int) {
	for i := range n {
		if i > 0 {
			sleep(ctx, time.Second)
		}
		r.netReset(ctx, path)
	}
}

// errNoProxies is a network fault's error on a system without proxies on its path.
var errNoProxies = errors.New("the system has no fault proxies on this path (Scenario.Network)")
