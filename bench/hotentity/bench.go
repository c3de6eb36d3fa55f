package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
)

// modeTimeout bounds one mode's run.
const modeTimeout = 10 * time.Minute

// bench holds what every round shares: the database, Redis, the broker, the loaded input
// topic and the workload it holds.
type bench struct {
	c       config
	w       workload
	dsn     string
	pool    *pgxpool.Pool
	rdb     *redis.Client
	brokers []string
	in      string   // input topic (and consumer.DeadLetterTopic(in))
	prefix  string   // Redis key prefix of this run
	topics  []string // created on external brokers, deleted by close
	log     *slog.Logger
	closers []func()
	// signer signs the input events and, in the choreo/signed mode, the outbox's; trusted
	// is its key, which that mode's consumer requires of every input event.
	signer  *event.Signer
	trusted map[string]*event.KeySet
}

func newBench(ctx context.Context, c config) (_ *bench, err error) {
	if c.events < 1 || c.partitions < 1 || c.accounts < 1 {
		return nil, fmt.Errorf("-events, -partitions and -accounts must be positive")
	}
	if err := benchutil.RequirePgbench(); err != nil {
		return nil, err
	}
	b := &bench{c: c, in: "hot-in",
		prefix: fmt.Sprintf("choreo_bench_hot_%d_%d:", os.Getpid(), time.Now().UnixNano()),
		log:    newLogger()}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if b.w, err = genWorkload(c.events, c.accounts, c.dup, c.seed); err != nil {
		return nil, err
	}
	if b.signer, b.trusted, err = newSigning(); err != nil {
		return nil, err
	}
	dsn, drop, err := benchutil.CreateDB(ctx, c.pg, "choreo_bench_hotentity")
	if err != nil {
		return nil, err
	}
	b.dsn = dsn
	b.closers = append(b.closers, func() { drop() })
	// One connection per partition worker, plus the relays' and the checks'.
	if b.pool, err = pgxpool.New(ctx, fmt.Sprintf("%s&pool_max_conns=%d", dsn, c.partitions+4)); err != nil {
		return nil, err
	}
	b.closers = append(b.closers, b.pool.Close)
	if err := setupSchema(ctx, b.pool, c.accounts); err != nil {
		return nil, err
	}
	if c.prefill > 0 {
		start := time.Now()
		if err := buildPrefilled(ctx, b.pool, c.prefill); err != nil {
			return nil, err
		}
		fmt.Fprintf(c.out, "prefilled an idempotency table with %d records in %s\n", c.prefill, time.Since(start).Round(time.Second))
	}
	b.rdb = redis.NewClient(&redis.Options{Addr: c.redis, PoolSize: 2 * c.partitions})
	b.closers = append(b.closers, func() { b.rdb.Close() }, func() { b.deleteRedisKeys(context.WithoutCancel(ctx)) })
	if err := b.rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis %s: %w", c.redis, err)
	}
	if c.brokers == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return nil, err
		}
		b.closers = append(b.closers, cluster.Close)
		b.brokers = cluster.ListenAddrs()
	} else {
		b.brokers = strings.Split(c.brokers, ",")
		b.in = fmt.Sprintf("hot-in-%d", time.Now().UnixNano())
		b.closers = append(b.closers, func() { b.deleteTopics(context.WithoutCancel(ctx)) })
	}
	if c.rate > 0 {
		return b, nil // each mode gets its own input topic, fed while it runs
	}
	if err := b.createTopics(ctx, b.in, consumer.DeadLetterTopic(b.in)); err != nil {
		return nil, err
	}
	if err := produce(ctx, b.brokers, b.in, b.w, 0, b.signer); err != nil {
		return nil, fmt.Errorf("loading %s: %w", b.in, err)
	}
	return b, nil
}

// newLogger is the pipelines' logger: warnings and errors, on stderr.
func newLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// close releases everything newBench set up, in reverse order.
func (b *bench) close() {
	for _, f := range slices.Backward(b.closers) {
		f()
	}
}

func (b *bench) brokerKind() string {
	if b.c.brokers == "" {
		return "in-process kfake broker"
	}
	return "brokers " + b.c.brokers
}

func (b *bench) deleteRedisKeys(ctx context.Context) {
	iter := b.rdb.Scan(ctx, 0, b.prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		b.rdb.Del(ctx, keys...)
	}
}

func (b *bench) createTopics(ctx context.Context, topics ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	if b.c.brokers != "" {
		b.topics = append(b.topics, topics...)
	}
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, int32(b.c.partitions), 1, nil, topics...)
	if err != nil {
		return err
	}
	return resp.Error()
}

// deleteTopics deletes the topics this run created on external brokers (an in-process
// cluster goes away with them).
func (b *bench) deleteTopics(ctx context.Context) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		return
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).DeleteTopics(ctx, b.topics...); err != nil {
		b.log.Warn("deleting the benchmark's topics", "err", err)
	}
}

// kgoOpts are the franz-go options both consumers get.
func (b *bench) kgoOpts() []kgo.Opt {
	opts := []kgo.Opt{kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
	if b.c.fetchMaxWait > 0 {
		opts = append(opts, kgo.FetchMaxWait(b.c.fetchMaxWait))
	}
	return opts
}

// measured is one round of one mode.
type measured struct {
	perSec  float64
	cpu     benchutil.CPUTime // per input event
	evPerTx float64
	// pgCPU and redisCPU are the database's backends' and the Redis server's CPU per
	// input event; relayBatch is the mean number of rows per relay round.
	pgCPU, redisCPU time.Duration
	relayBatch      float64
}

// modeSpec is one pipeline mode: the hand-written floor, or choreo one event per
// transaction (batch 0) or in batches of batch, with the UPDATE queued by consumer.AtCommit when atCommit,
// with event signing when signed, without the fence check when unfenced; in this process
// (processes 0) or in that many child processes sharing the consumer group.
type modeSpec struct {
	name      string
	hand      bool
	batch     int
	atCommit  bool
	signed    bool
	unfenced  bool
	processes int
	prefill   int // idempotency records in the table the mode runs on
}

// modes lists the pipeline modes of a run, the floor first.
func (c config) modes() []modeSpec {
	ms := []modeSpec{{name: "hand-written (franz-go + pgx + redislock)", hand: true}, {name: "choreo"}}
	if c.signed {
		ms = append(ms, modeSpec{name: "choreo/signed (Ed25519)", signed: true})
	}
	if c.unfenced {
		ms = append(ms, modeSpec{name: "choreo/unfenced", unfenced: true})
	}
	if c.atCommit {
		ms = append(ms, modeSpec{name: "choreo/atcommit", atCommit: true})
	}
	if c.prefill > 0 {
		ms = append(ms, modeSpec{name: fmt.Sprintf("choreo/prefilled (%s idempotency records)", count(c.prefill)), prefill: c.prefill})
	}
	for _, n := range c.batches {
		ms = append(ms, modeSpec{name: fmt.Sprintf("choreo/batch=%d", n), batch: n})
		if c.atCommit {
			ms = append(ms, modeSpec{name: fmt.Sprintf("choreo/batch=%d/atcommit", n), batch: n, atCommit: true})
		}
	}
	for _, n := range c.processes {
		ms = append(ms,
			modeSpec{name: "hand-written, " + processesName(n), hand: true, processes: n},
			modeSpec{name: "choreo, " + processesName(n), processes: n})
	}
	return ms
}

// rounds runs pgbench and every mode c.repeat times, in turn, and summarises each.
func (b *bench) rounds(ctx context.Context) ([]figures, error) {
	specs := b.c.modes()
	names := []string{"pgbench, same transaction"}
	for _, s := range specs {
		names = append(names, s.name)
	}
	all := make([][]measured, len(names))
	for round := range max(b.c.repeat, 1) {
		if err := resetState(ctx, b.pool); err != nil {
			return nil, err
		}
		pgb, err := b.pgbench(ctx)
		if err != nil {
			return nil, err
		}
		all[0] = append(all[0], pgb)
		for i, s := range specs {
			m, err := b.mode(ctx, s, round)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", s.name, round+1, err)
			}
			all[i+1] = append(all[i+1], m)
		}
	}
	out := make([]figures, len(names))
	for i, ms := range all {
		slices.SortFunc(ms, func(a, b measured) int { return cmp.Compare(a.perSec, b.perSec) })
		med := ms[len(ms)/2]
		out[i] = figures{
			Mode: names[i], EventsPerSec: med.perSec, Min: ms[0].perSec, Max: ms[len(ms)-1].perSec,
			CPUMachineUS: float64(med.cpu.Machine) / 1e3, CPUProcessUS: float64(med.cpu.Process) / 1e3,
			EventsPerTx: med.evPerTx, CPUPostgresUS: float64(med.pgCPU) / 1e3,
			CPURedisUS: float64(med.redisCPU) / 1e3, RelayRowsPerRound: med.relayBatch,
		}
	}
	for i := range out {
		out[i].VsFloor = out[i].EventsPerSec / out[1].EventsPerSec
		out[i].VsPgbench = out[i].EventsPerSec / out[0].EventsPerSec
	}
	for i, s := range specs {
		out[i+1].Processes, out[i+1].Prefilled = s.processes, s.prefill
		if s.prefill > 0 && out[2].Mode == "choreo" {
			out[i+1].VsEmptyTable = out[i+1].EventsPerSec / out[2].EventsPerSec
		}
		for j, one := range specs {
			if s.processes > 1 && one.processes == 1 && one.hand == s.hand {
				out[i+1].VsOneProcess = out[i+1].EventsPerSec / out[j+1].EventsPerSec
			}
		}
	}
	return out, nil
}

// pipeline is one mode's running pipeline.
type pipeline interface {
	run(ctx context.Context) error
}

// pipelineSite is where one pipeline of a mode runs: its input topic, consumer group and
// output topic, its clients, whether it runs the hand-written relay (choreo's relays elect
// a leader among themselves) and whether its outbox wakes relays in other processes.
type pipelineSite struct {
	in, group, out string
	pool           *pgxpool.Pool
	rdb            *redis.Client
	relay          bool // the hand-written pipeline runs its relay
	notify         bool // choreo's outbox sends a NOTIFY for relays in other processes
	onAcked        func(n int)
}

// pipeline builds spec's pipeline at site (in this process) and a function that returns the
// transactions it committed or skipped so far and the records they settled (0, 0 for the
// hand-written pipeline, which handles one record per transaction).
func (b *bench) pipeline(spec modeSpec, site pipelineSite) (pipeline, func() (txs, records int64)) {
	if spec.hand {
		return &handWritten{
			brokers: b.brokers, group: site.group, in: site.in, out: site.out, pool: site.pool,
			locks: redislock.New(site.rdb), prefix: b.prefix + "hw:", kgoOpts: b.kgoOpts(), log: b.log,
			onAcked: site.onAcked, noRelay: !site.relay,
		}, func() (int64, int64) { return 0, 0 }
	}
	p := &choreoPipeline{
		brokers: b.brokers, group: site.group, in: site.in, out: site.out, batch: spec.batch,
		atCommit: spec.atCommit, unfenced: spec.unfenced, notify: site.notify, pool: site.pool, rdb: site.rdb,
		lockNS: b.prefix + "choreo:", kgoOpts: b.kgoOpts(), log: b.log, onAcked: site.onAcked,
	}
	if spec.signed {
		p.signer, p.trusted = b.signer, b.trusted
	}
	return p, func() (int64, int64) { return p.txs.Load(), p.records.Load() }
}

// eventsPerTx is records/txs, or 1 when no transaction was counted (the hand-written
// pipeline's one record per transaction).
func eventsPerTx(txs, records int64) float64 {
	if txs == 0 {
		return 1
	}
	return float64(records) / float64(txs)
}

// mode runs one mode over the whole input from a reset state and checks its result.
func (b *bench) mode(ctx context.Context, spec modeSpec, round int) (measured, error) {
	if err := resetState(ctx, b.pool); err != nil {
		return measured{}, err
	}
	slug := "choreo"
	switch {
	case spec.hand:
		slug = "hand"
	case spec.batch > 0:
		slug = fmt.Sprintf("batch%d", spec.batch)
		if spec.atCommit {
			slug += "-atcommit"
		}
	case spec.atCommit:
		slug = "atcommit"
	case spec.signed:
		slug = "signed"
	case spec.unfenced:
		slug = "unfenced"
	case spec.prefill > 0:
		slug = "prefilled"
	}
	if spec.processes > 0 {
		slug += fmt.Sprintf("-p%d", spec.processes)
	}
	out := fmt.Sprintf("hot-out-%s-%d-%d", slug, round, time.Now().UnixNano())
	if err := b.createTopics(ctx, out); err != nil {
		return measured{}, err
	}
	in := b.in
	if b.c.rate > 0 {
		in = "hot-in" + strings.TrimPrefix(out, "hot-out")
		if err := b.createTopics(ctx, in, consumer.DeadLetterTopic(in)); err != nil {
			return measured{}, err
		}
	}
	group := "hot-" + out
	if spec.prefill > 0 {
		if err := swapPrefilled(ctx, b.pool); err != nil {
			return measured{}, err
		}
		defer func() {
			if err := unswapPrefilled(context.WithoutCancel(ctx), b.pool, group+"/"+choreoName); err != nil {
				b.log.Error("bench/hotentity: restoring the empty idempotency table", "err", err)
			}
		}()
	}

	var (
		acked    atomic.Int64
		rounds   atomic.Int64 // relay rounds acknowledged
		once     sync.Once
		finished = make(chan time.Time, 1)
		unique   = int64(b.w.unique)
	)
	onAcked := func(n int) {
		rounds.Add(1)
		if acked.Add(int64(n)) >= unique {
			once.Do(func() { finished <- time.Now() })
		}
	}
	var (
		p      pipeline
		counts func() (txs, records int64)
	)
	if spec.processes > 0 {
		cp := &childPipelines{b: b, spec: spec, in: in, group: group, out: out, onAcked: onAcked}
		p, counts = cp, cp.counts
	} else {
		p, counts = b.pipeline(spec, pipelineSite{in: in, group: group, out: out, pool: b.pool, rdb: b.rdb, relay: true, onAcked: onAcked})
	}
	serverBefore := sampleServerCPU(ctx, b.pool, b.rdb)
	before, err := benchutil.SampleCPU()
	if err != nil {
		return measured{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go pprof.Do(runCtx, pprof.Labels("mode", spec.name), func(ctx context.Context) { done <- p.run(ctx) })
	var fed chan error // with -rate, the input is produced while the pipeline runs
	if b.c.rate > 0 {
		fed = make(chan error, 1)
		go func() { fed <- produce(runCtx, b.brokers, in, b.w, b.c.rate, b.signer) }()
	}
	var end time.Time
	timeout := time.After(modeTimeout)
	for end.IsZero() {
		select {
		case end = <-finished:
		case err := <-fed:
			if err != nil {
				return measured{}, fmt.Errorf("feeding %s: %w", in, err)
			}
			fed = nil
		case err := <-done:
			return measured{}, fmt.Errorf("pipeline stopped early after %d of %d output records: %v", acked.Load(), unique, err)
		case <-timeout:
			cancel()
			<-done
			return measured{}, fmt.Errorf("timed out after %v with %d of %d output records", modeTimeout, acked.Load(), unique)
		}
	}
	after, cpuErr := benchutil.SampleCPU()
	if cp, ok := p.(*childPipelines); ok {
		after.Process += cp.cpu() // they started after the first sample
	}
	pgCPU, redisCPU := sampleServerCPU(ctx, b.pool, b.rdb).since(serverBefore, b.c.events)
	cancel()
	if err := errors.Join(<-done, cpuErr); err != nil {
		return measured{}, err
	}
	if err := check(ctx, b.pool, b.brokers, in, out, b.w); err != nil {
		return measured{}, err
	}
	return measured{
		perSec:  float64(b.c.events) / end.Sub(start).Seconds(),
		cpu:     after.Sub(before).Per(b.c.events),
		evPerTx: eventsPerTx(counts()),
		pgCPU:   pgCPU, redisCPU: redisCPU,
		relayBatch: float64(acked.Load()) / float64(max(rounds.Load(), 1)),
	}, nil
}

// pgbench runs the transaction of one event as plain SQL on the hand-written tables: the
// dedup insert, the UPDATE on a random account of the same range and the outbox insert
// with a record of the size the pipelines write, at one client per partition.
func (b *bench) pgbench(ctx context.Context) (measured, error) {
	next, err := event.New("hotentity", "account.credited", accountID(1), credit{Amount: 42})
	if err != nil {
		return measured{}, err
	}
	rec, err := event.ToRecord("hot-out", next.CausedBy(b.w.events[0]))
	if err != nil {
		return measured{}, err
	}
	headers, err := json.Marshal(rec.Headers)
	if err != nil {
		return measured{}, err
	}
	script := fmt.Sprintf(`\set aid random(1, %d)
\set amount random(1, 100)
\set key random(1, 1000000000000)
BEGIN;
INSERT INTO hw_dedup (event_id) VALUES ('pgbench-' || :client_id || '-' || :key) ON CONFLICT DO NOTHING;
UPDATE accounts SET balance = balance + :amount WHERE id = 'acct-' || :aid;
INSERT INTO hw_outbox (topic, key, headers, payload) VALUES ('hot-out', 'acct-' || :aid, '%s'::jsonb, '\x%s');
COMMIT;
`, b.c.accounts, headers, hex.EncodeToString(rec.Value))
	r, err := benchutil.Pgbench{DSN: b.dsn, Script: script, Clients: b.c.partitions, Duration: b.c.pgbenchT}.Run(ctx)
	if err != nil {
		return measured{}, err
	}
	return measured{perSec: r.TPS, cpu: r.CPU.Per(r.Transactions), evPerTx: 1}, nil
}
